import Foundation
import Shell

// opsh: the interactive shell, `opsh run FILE`, `opsh -e CODE`, and the
// commands beside them. This is the process's one exit: every mode
// returns its status (or throws ``Stop``) after it has ended its run as
// its rules say — committed or rolled back, the summary printed, the
// audit row written — and only then does the process exit. A bad command
// line ends here with status 2.
let status: Int32
do {
    status = try OpshCommand.main(CommandLine.arguments.dropFirst())
} catch let stop as Stop {
    if let message = stop.message { Console(colour: Terminal.wantsColour(descriptor: 2)).error(message) }
    status = stop.status.rawValue
} catch {
    FileHandle.standardError.write(Data(("\(error)\n").utf8))
    status = ExitStatus.usage.rawValue
}
// What Lua's print and io.write left in C's buffer: a write that failed
// (a full disk under `> out.txt`) turns a success into a failure, said.
var exitStatus = status
if Terminal.reportStandardOutputFailure(on: Console(colour: Terminal.wantsColour(descriptor: 2))), exitStatus == 0 {
    exitStatus = ExitStatus.scriptError.rawValue
}
fflush(nil)
exit(exitStatus)
