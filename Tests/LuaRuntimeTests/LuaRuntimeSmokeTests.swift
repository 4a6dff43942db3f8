import Testing
@testable import LuaRuntime

@Test func LuaRuntimeModuleLoads() {
    #expect(Bool(true))
}
