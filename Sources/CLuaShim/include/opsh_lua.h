// The C side of the Lua bridge: Lua API macros as functions Swift can call,
// and the trampoline that raises Lua errors after Swift frames have returned.
#pragma once
#include <lua.h>
#include <lualib.h>
#include <lauxlib.h>
