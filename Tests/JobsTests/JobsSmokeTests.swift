import Testing
@testable import Jobs

@Test func JobsModuleLoads() {
    #expect(Bool(true))
}
