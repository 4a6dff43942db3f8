import Store
print("opsh")
