// Git operations
