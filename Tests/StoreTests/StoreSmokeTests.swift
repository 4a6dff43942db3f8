import Testing
@testable import Store

@Test func StoreModuleLoads() {
    #expect(Bool(true))
}
