import Foundation
import LuaRuntime

/// What other threads hand the Lua thread (a watch's change, a followed
/// job's lines) and what to do with each: a session's event queue and
/// its subscribers, the same for every engine.
final class Subscriptions {
    let events = EventQueue()
    private var handlers: [Int: (Any & Sendable) throws -> Void] = [:]
    private var next = 1

    /// Registers what to do with the events posted for a new id; returns it.
    func subscribe(_ handler: @escaping (Any & Sendable) throws -> Void) -> Int {
        defer { next += 1 }
        handlers[next] = handler
        return next
    }

    func unsubscribe(_ id: Int) {
        handlers[id] = nil
    }

    /// Whether anything may still post events.
    var isEmpty: Bool { handlers.isEmpty }

    /// Runs the handlers of queued events on this (the Lua) thread.
    /// Errors raised by callbacks are returned, not thrown, so one bad
    /// callback does not stop the others; an interrupt is thrown.
    func deliver() throws -> [LuaError] {
        var errors: [LuaError] = []
        for (id, value) in events.drain() {
            guard let handler = handlers[id] else { continue }
            do {
                try handler(value)
            } catch let error as LuaError {
                if error.endsTheRun { throw error }
                errors.append(error)
            } catch {
                errors.append(LuaError(kind: .runtime, message: String(describing: error)))
            }
        }
        return errors
    }
}
