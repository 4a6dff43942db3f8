import Testing
@testable import Git

@Test func GitModuleLoads() {
    #expect(Bool(true))
}
