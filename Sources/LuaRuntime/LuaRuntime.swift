// The Lua runtime bridge
