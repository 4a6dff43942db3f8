import Foundation

// opsh: the interactive shell, `opsh run FILE`, `opsh -e CODE`.
// The modes end the process themselves with an ExitStatus; a bad command
// line ends here with status 2.
do {
    try OpshCommand.main(CommandLine.arguments.dropFirst())
} catch {
    FileHandle.standardError.write(Data(("\(error)\n").utf8))
    exit(ExitStatus.usage.rawValue)
}
