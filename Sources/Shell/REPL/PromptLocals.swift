import CLuaShim
import LuaRuntime

/// The prompt's environment: chunks typed at the prompt run with it as
/// their `_ENV`, so a top-level `local` of one chunk (made an assignment by
/// ``TopLevelLocals``) is seen by the chunks after it. Globals read through it as ever (its `__index` is `_G`);
/// an assignment to a name not declared local goes to `_G`. Functions
/// defined at the prompt keep seeing the prompt's locals.
///
/// A prompt local that holds nil reads the global of its name, if there
/// is one: the note at its declaration says so.
final class PromptLocals {
    let environment: LuaReference
    /// `declare(name, …)`: marks names local; returns those that hide a
    /// global and were not local before.
    private let declare: LuaReference
    private let runtime: LuaRuntime

    init?(runtime: LuaRuntime) {
        self.runtime = runtime
        let made = try? runtime.execute("""
            local G, rawget, rawset, setmetatable, select = _G, rawget, rawset, setmetatable, select
            local declared = {}
            local environment = setmetatable({}, {
              __index = G,
              __newindex = function(t, k, v) if declared[k] then rawset(t, k, v) else G[k] = v end end,
            })
            local function declare(...)
              local hiding = {}
              for i = 1, select('#', ...) do
                local name = select(i, ...)
                if not declared[name] and G[name] ~= nil then hiding[#hiding + 1] = name end
                declared[name] = true
              end
              return table.concat(hiding, ' ')
            end
            return environment, declare
            """, chunkName: "=(prompt locals)") { stack, first, count in
            count == 2 ? (stack.reference(at: first), stack.reference(at: first + 1)) : nil
        }
        guard let made else { return nil }
        (environment, declare) = made
    }

    /// Whether `name` is a prompt local holding a value (read raw).
    func holds(_ name: String) -> Bool {
        let state = runtime.state
        runtime.stack.push(.reference(environment))
        lua_pushstring(state, name)
        let type = lua_rawget(state, -2)
        opsh_pop(state, 2)
        return type != LUA_TNIL
    }

    /// Declares `names` local at the prompt; returns those that now hide a
    /// global of the same name.
    func declare(_ names: [String]) -> [String] {
        guard !names.isEmpty else { return [] }
        let hiding = (try? runtime.call(declare, names.map { .string($0) }))?.first
        guard case let .string(text)? = hiding, !text.isEmpty else { return [] }
        return text.split(separator: " ").map(String.init)
    }
}
