import ArgumentParser
import Foundation

// opsh: the interactive shell, `opsh run FILE`, `opsh -e CODE`.
// The modes end the process themselves with an ExitStatus; parsing errors
// end here with status 2 (swift-argument-parser would say 64).
do {
    var command = try OpshCommand.parseAsRoot()
    try command.run()
} catch {
    let code = OpshCommand.exitCode(for: error)
    if code == .success {
        print(OpshCommand.fullMessage(for: error))
        exit(0)
    }
    if error is ExitCode { exit(code.rawValue) }
    FileHandle.standardError.write(Data((OpshCommand.fullMessage(for: error) + "\n").utf8))
    exit(ExitStatus.usage.rawValue)
}
