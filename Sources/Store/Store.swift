// The storage core: see README.md
