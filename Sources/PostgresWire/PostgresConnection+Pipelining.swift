/// A pipeline sent with ``PostgresConnection/sendPipeline(_:)`` whose
/// results are not read yet.
public struct PipelineInFlight {
    let plan: [PostgresConnection.PlannedStep]
    /// The ``PostgresConnection/prelude``'s steps first in it.
    let hidden: Int
    /// Its steps.
    public var count: Int { plan.count - hidden }
}

/// Pipelines whose results are read later: the caller writes the next
/// one while the server still runs this one, as libpq's pipeline mode
/// lets a client do.
extension PostgresConnection {
    /// Writes `steps` as ``pipeline(_:)`` does (one Sync at the end) and
    /// returns at once, without reading. The caller must read it with
    /// ``receivePipeline(_:)``, in the order pipelines were sent, before
    /// any other call on the connection (``beforeNextCall`` is where a
    /// caller makes sure of that): until then the server's answers wait
    /// in the socket. Keep what is unread small (a few thousand
    /// statements' answers): the server stops running statements while the
    /// socket is full of answers nobody reads, and a client that is still
    /// writing would then wait for ever. ``beforeNextCall`` is not run:
    /// this is the caller's queue going on.
    public func sendPipeline(_ steps: [(sql: String, parameters: [PostgresValue])]) throws -> PipelineInFlight {
        guard socket != nil else { throw PostgresClientError.connectionClosed("it was closed (open a new connection)") }
        var checked: String? = nil
        for (index, step) in steps.enumerated() {
            // A batch repeats one statement: each text is checked once in a row.
            if step.sql != checked {
                try checkUsable(step.sql, runningQueued: false)
                checked = step.sql
            }
            guard step.parameters.count <= 65_535 else {
                throw PostgresClientError.unsupported("\(step.parameters.count) parameters: the protocol carries at most 65,535 per statement")
            }
            if index < steps.count - 1, step.sql.utf8.first.map({ $0 == UInt8(ascii: "c") || $0 == UInt8(ascii: "C") || $0 <= 32 }) == true,
               step.sql.drop(while: \.isWhitespace).prefix(4).lowercased() == "copy" {
                throw PostgresClientError.unsupported("COPY in a pipeline: only as its last step (step \(index) of \(steps.count))")
            }
        }
        let first = askPrelude()
        return PipelineInFlight(plan: try writePipeline(first.map { [$0] + steps } ?? steps), hidden: first == nil ? 0 : 1)
    }

    /// Reads the results of the oldest pipeline sent with
    /// ``sendPipeline(_:)``: as ``pipeline(_:)`` returns and throws them,
    /// except that a stale first statement is not run again (what was sent
    /// after it has run already): its error is thrown. Each row goes to
    /// `eachRow` with its step's index, in place; the results have none.
    public func receivePipeline(_ inFlight: PipelineInFlight,
                                eachRow: (Int, PostgresDataRow) throws -> Void) throws -> [PostgresResult] {
        do {
            return try readPipeline(inFlight.plan, hidden: inFlight.hidden, eachRow: eachRow)
        } catch let stale as StaleFirstStep {
            throw stale.error
        }
    }
}
