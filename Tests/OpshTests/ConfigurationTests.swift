import Foundation
import Testing

/// `config.get`/`config.save` (the configuration aggregate and its merge):
/// one script, the same output on both engines.
@Suite struct ConfigurationTests {
    @Test(arguments: Engine.allCases) func theConfigurationMergesTheSameOnBothEngines(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let script = try sandbox.script("config.lua", """
            local function show(c)
              local policies = {}
              for _, p in ipairs(c.routing_policies) do
                policies[#policies + 1] = p.name .. "/" .. p.priority .. "/" .. p.execution_target .. "/" .. json.encode(p.conditions)
              end
              print(c.id, c.base_url, c.model_cache_size, c.analytics.enabled, c.analytics.sampling_rate,
                    c.storage.telemetry_retention_days, c.storage.auto_cleanup, table.concat(policies, ","))
            end
            print(config.get())
            show(config.save{ base_url = "https://a.example", created_at = 1, updated_at = 2,
                              routing_policies = { { id = "p1", name = "long", priority = 10, execution_target = "cloud", conditions = { minTokens = 2048 } },
                                                   { id = "p2", name = "short" } } })
            local c = config.get()
            c.analytics.sampling_rate = 0.25
            c.storage.auto_cleanup = false
            c.routing_policies[2] = nil
            c.updated_at = 3
            show(config.save(c))
            show(config.save{ id = "staging", base_url = "https://s.example", created_at = 5, updated_at = 6 })
            print(select(2, pcall(config.save, { id = "x" })))
            print(select(2, pcall(config.save, { base_url = "u", routing_policies = { { name = "z", execution_target = "mars" } } })))
            print(#config.list(), config.delete("staging"), #config.list())
            """)
        let run = try sandbox.opsh(["run", script], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == """
            nil
            default\thttps://a.example\t0\ttrue\t1.0\t30\ttrue\tlong/10/cloud/{"minTokens":2048},short/0/onDevice/{}
            default\thttps://a.example\t0\ttrue\t0.25\t30\tfalse\tlong/10/cloud/{"minTokens":2048}
            staging\thttps://s.example\t0\ttrue\t1.0\t30\ttrue\t
            bad argument #1 to 'save' (missing field 'base_url' (a new configuration needs: base_url))
            invalid value for routing_policies.execution_target: 'mars' is not one of onDevice, cloud, hybrid
            2\ttrue\t1

            """, "\(run.stdout)")
        #expect(try db.count("routing_policies") == 1)
    }
}
