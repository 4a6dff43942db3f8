import Foundation
import Testing

/// `query(key)` for every form of the key grammar, on both engines, from
/// the same rows (TestSupport's QueryKeyRows): one body, one expected
/// value per key (issue 23: "every query key kind … work[s] on
/// PostgreSQL"). The PostgreSQL database sorts text by a language's rules
/// (ICU en-US), so a key that leaves the order of text to the server shows.
/// StoreTests' QueryKeyEngineTests runs the grammar's own list of forms
/// through Store; this runs what an operator types.
@Suite struct QueryKeyValueTests {
    /// A value as text that tells integers from floats and rows (their
    /// columns, in order) from objects. An empty list is `[]` whatever its
    /// metatable: on PostgreSQL an empty list of rows inside an aggregate
    /// (a configuration without policies) has no column list yet.
    static let show = #"""
        local function show(v)
          local t = type(v)
          if t == "string" then return string.format("%q", v) end
          if math.type(v) == "float" then return string.format("%.17g", v) .. "f" end
          if t ~= "table" then return tostring(v) end
          local parts = {}
          if next(v) == nil then return "[]" end
          if #v > 0 then
            for i = 1, #v do parts[i] = show(v[i]) end
            return "[" .. table.concat(parts, ",") .. "]"
          end
          local names = {}
          for name in pairs(v) do names[#names + 1] = name end
          table.sort(names)
          for _, name in ipairs(names) do parts[#parts + 1] = name .. "=" .. show(v[name]) end
          local meta = getmetatable(v)
          local columns = meta and meta.columns and "<" .. table.concat(meta.columns, ",") .. ">" or ""
          return columns .. "{" .. table.concat(parts, ",") .. "}"
        end
        """#

    /// One key of each form of `QueryKeyGrammar.forms`, in its order, then
    /// a builder's key and keys of rows that do not exist.
    static let keys = [
        "projects.all.ids", "projects.versionStrings",
        #"project."com.example.app""#, #"project."com.example.app".detail"#, #"project."com.example.app".schemes.ids"#,
        #"project."com.example.app".buildVersionStrings"#, #"project."com.example.app".latestBuilds.limit3"#,
        "scheme.s1", #"schemes.s1,"s.2",S3.builds.ids"#, #"schemes.s1,"s.2",S3.builds.ids."1.2.0""#,
        "build.b3", "build.b3.logs.ids", "build.b3.logs.ids.debug", "build.b3.logs.ids.categorybuild",
        "build.b3.logs.ids.debug.categorybuild", "build.b3.crashLogs.ids", "buildLog.l1", "crashLog.c1",
        "models.all.ids", "model.m1", "model.m1.usage", "session.g1", "session.g1.generations", "telemetry.counts",
        "config", #"config."eu.west""#,
    ]

    /// What both engines give (byte order for text; a tie of one instant
    /// in the order written, crashes of one instant by their identifier).
    static let expected = #"""
        projects.all.ids	["Zeta","a\"b","com.example.app"]
        projects.versionStrings	{Zeta=["9.0"],com.example.app=["1.10.0","1.2.0","V2","v1"]}
        project."com.example.app"	<bundleIdentifier,name,displayName,gitRepositoryURL,createdAt>{bundleIdentifier="com.example.app",createdAt=1f,displayName="App",gitRepositoryURL="/srv/app",name="app"}
        project."com.example.app".detail	{project=<bundleIdentifier,name,displayName,gitRepositoryURL,createdAt>{bundleIdentifier="com.example.app",createdAt=1f,displayName="App",gitRepositoryURL="/srv/app",name="app"},recentBuildIds=["b5","b4","b3","b2","b1"],schemeIds=["s1","S3","s.2"]}
        project."com.example.app".schemes.ids	["s1","S3","s.2"]
        project."com.example.app".buildVersionStrings	["v1","V2","1.2.0","1.10.0"]
        project."com.example.app".latestBuilds.limit3	[<id,schemeId,versionString,buildNumber,status,createdAt,startDate,endDate,exitCode,progress,commitHash,runnerHost,runnerPid,runnerStartedAt,runnerId,heartbeatAt,heartbeatInterval,attempts>{attempts=0,buildNumber=5,createdAt=40f,id="b5",progress=0f,schemeId="S3",status="queued",versionString="v1"},<id,schemeId,versionString,buildNumber,status,createdAt,startDate,endDate,exitCode,progress,commitHash,runnerHost,runnerPid,runnerStartedAt,runnerId,heartbeatAt,heartbeatInterval,attempts>{attempts=0,buildNumber=4,createdAt=40f,id="b4",progress=0f,schemeId="S3",status="queued",versionString="V2"},<id,schemeId,versionString,buildNumber,status,createdAt,startDate,endDate,exitCode,progress,commitHash,runnerHost,runnerPid,runnerStartedAt,runnerId,heartbeatAt,heartbeatInterval,attempts>{attempts=0,buildNumber=3,createdAt=30f,id="b3",progress=0f,schemeId="s.2",status="running",versionString="1.10.0"}]
        scheme.s1	<id,projectBundleIdentifier,name,order,buildCommand,platforms,passEnvironment>{buildCommand="",id="s1",name="Release",order=0,passEnvironment="[]",platforms="[]",projectBundleIdentifier="com.example.app"}
        schemes.s1,"s.2",S3.builds.ids	["b5","b4","b3","b2","b1"]
        schemes.s1,"s.2",S3.builds.ids."1.2.0"	["b2","b1"]
        build.b3	<id,schemeId,versionString,buildNumber,status,createdAt,startDate,endDate,exitCode,progress,commitHash,runnerHost,runnerPid,runnerStartedAt,runnerId,heartbeatAt,heartbeatInterval,attempts>{attempts=0,buildNumber=3,createdAt=30f,id="b3",progress=0f,schemeId="s.2",status="running",versionString="1.10.0"}
        build.b3.logs.ids	["l9","l5","l1"]
        build.b3.logs.ids.debug	["l9","l2","l5","l1","l0"]
        build.b3.logs.ids.categorybuild	["l9","l1"]
        build.b3.logs.ids.debug.categorybuild	["l9","l2","l1","l0"]
        build.b3.crashLogs.ids	["C2","c0","c1"]
        buildLog.l1	<id,buildId,level,category,content,createdAt>{buildId="b3",category="build",content="slow",createdAt=3f,id="l1",level="warning"}
        crashLog.c1	<incidentIdentifier,buildId,content,signal,createdAt>{buildId="b3",content="segfault",createdAt=5f,incidentIdentifier="c1",signal=11}
        models.all.ids	["M2","gpt-4.1","m1"]
        model.m1	<id,name,format,size_bytes,framework,quantization,capabilities,created_at,updated_at>{capabilities="[\"chat\"]",created_at=1f,format="gguf",framework="llama.cpp",id="m1",name="Llama",size_bytes=0,updated_at=2f}
        model.m1.usage	[<id,model_id,day,generation_count,total_tokens,total_cost,total_latency_ms,error_count>{day="2024-05-01",error_count=1,generation_count=3,id=2,model_id="m1",total_cost=0.0035000000000000001f,total_latency_ms=400.5f,total_tokens=40},<id,model_id,day,generation_count,total_tokens,total_cost,total_latency_ms,error_count>{day="2024-05-02",error_count=0,generation_count=1,id=1,model_id="m1",total_cost=0.0040000000000000001f,total_latency_ms=250f,total_tokens=15}]
        session.g1	<id,model_id,session_type,total_tokens,total_cost,created_at,updated_at>{created_at=1f,id="g1",model_id="m1",session_type="chat",total_cost=0f,total_tokens=0,updated_at=2f}
        session.g1.generations	[<id,session_id,sequence_number,prompt_tokens,completion_tokens,latency_ms,cost,execution_target,created_at>{completion_tokens=2,cost=0.5f,created_at=3f,execution_target="onDevice",id="g1-1",latency_ms=12.5f,prompt_tokens=1,sequence_number=1,session_id="g1"},<id,session_id,sequence_number,prompt_tokens,completion_tokens,latency_ms,cost,execution_target,created_at>{completion_tokens=6,cost=0.25f,created_at=4f,execution_target="onDevice",id="g1-2",latency_ms=30f,prompt_tokens=5,sequence_number=2,session_id="g1"}]
        telemetry.counts	{Zap=1,a"b=1,crash=1,open=2}
        config	<id,api_key,base_url,model_cache_size,created_at,updated_at,analytics,storage,routing_policies>{base_url="https://a.example",created_at=1f,id="default",model_cache_size=0,routing_policies=[],updated_at=2f}
        config."eu.west"	<id,api_key,base_url,model_cache_size,created_at,updated_at,analytics,storage,routing_policies>{analytics=<configuration_id,enabled,sampling_rate,batch_size,flush_interval_seconds>{batch_size=100,configuration_id="eu.west",enabled=1,flush_interval_seconds=60f,sampling_rate=0.25f},base_url="https://eu.example",created_at=1f,id="eu.west",model_cache_size=0,routing_policies=[<id,configuration_id,name,priority,execution_target,conditions>{conditions="{}",configuration_id="eu.west",execution_target="hybrid",id="p3",name="cheap",priority=9},<id,configuration_id,name,priority,execution_target,conditions>{conditions="{}",configuration_id="eu.west",execution_target="onDevice",id="p2",name="Short",priority=5},<id,configuration_id,name,priority,execution_target,conditions>{conditions="{}",configuration_id="eu.west",execution_target="cloud",id="p1",name="long",priority=5}],storage=<configuration_id,max_cache_size_bytes,telemetry_retention_days,auto_cleanup>{auto_cleanup=1,configuration_id="eu.west",max_cache_size_bytes=0,telemetry_retention_days=7},updated_at=2f}
        builder	["l9","l5","l1"]
        missing	nil	nil	0	nil
        """#

    @Test(arguments: Engine.allCases) func everyKeyFormGivesTheSameValueOnBothEngines(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine, icuLocale: "en-US")
        try db.sql(QueryKeyRows.seed)
        let lua = Self.show + "\n" + Self.keys.map { "print(\(luaString($0)), show(query(\(luaString($0)))))" }.joined(separator: "\n") + """

            print("builder", show(query(key.build("b3").logs.ids)))
            print("missing", query("build.nope"), query(key.project("nope").detail), #query(key.model("nope").usage), query("config.nope"))
            """
        let run = try sandbox.opsh(["-e", lua], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let expected = Self.expected.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        for (line, wanted) in zip(lines, expected) {
            #expect(line == wanted)
        }
        #expect(lines.count == expected.count + 1, "\(run.stdout)")
    }

    /// A project, a scheme, two builds and telemetry (the watch tests' rows too).
    static let fewRows = """
        db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('a', 'App', 'App', '/r', 1)")
        db.exec("INSERT INTO schemes (id, projectBundleIdentifier, name, \\"order\\") VALUES ('s1', 'a', 'Release', 0)")
        db.exec("INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) VALUES ('b1', 's1', '1.0', 1, 2)")
        db.exec("INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) VALUES ('b2', 's1', '1.1', 2, 3)")
        db.exec("INSERT INTO telemetry (event, created_at) VALUES ('start', 1), ('start', 2), ('stop', 3)")
        """

    /// A key read sees what the session sees (ARCHITECTURE.md, "One data
    /// path"; issue 28: key reads got a route of their own): inside
    /// `db.transaction` its own uncommitted writes, also after rounds of
    /// repository writes stepped in C; not a savepoint's that was rolled
    /// back; under `--dry-run` the dry run's writes, none of which stays;
    /// and another process's commit between two reads of one session.
    @Test(arguments: Engine.allCases) func aKeyReadSeesTheSessionsOwnWritesAndOthersCommits(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let setUp = try sandbox.opsh(["-e", Self.fewRows], on: db)
        #expect(setUp.status == 0, "\(setUp.stderr)")
        let inTransaction = try sandbox.opsh(["-e", """
            local statuses = { "running", "succeeded", "failed", "cancelled" }
            db.transaction(function()
              for i = 1, 4 do builds.update("b1", { status = statuses[i] }) print(query(key.build("b1")).status) end
              print(pcall(db.transaction, function()
                builds.update("b1", { status = "queued" }) print(query(key.build("b1")).status) error("undo the savepoint")
              end))
              print(query(key.build("b1")).status)
            end)
            print(query(key.build("b1")).status)
            """], on: db)
        #expect(inTransaction.status == 0, "\(inTransaction.stderr)")
        let lines = inTransaction.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 8, "\(inTransaction.stdout)")
        #expect(Array(lines.prefix(5)) == ["running", "succeeded", "failed", "cancelled", "queued"], "\(inTransaction.stdout)")
        #expect(lines.count == 8 && lines[5].hasPrefix("false") && lines[5].contains("undo the savepoint"), "\(inTransaction.stdout)")
        #expect(Array(lines.suffix(2)) == ["cancelled", "cancelled"], "\(inTransaction.stdout)")
        let dry = try sandbox.opsh(["--dry-run", "-e", """
            for i = 1, 4 do builds.update("b1", { status = "running" }) end
            print(query(key.build("b1")).status)
            """], on: db)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout == "running\n", "\(dry.stdout)")
        #expect(try db.sql("SELECT status FROM builds WHERE id = 'b1'") == "cancelled")
        // Another process's commit, between two reads of one run: seen
        // once the reads' shared snapshot (at most 50 ms, ARCHITECTURE.md,
        // "Connections, by role") has ended, not never.
        let reader = try sandbox.start(opshExecutable, ["--db", db.db, "-e", """
            print(query(key.build("b1")).status) io.stdout:flush()
            io.read("l")
            local started, status = os.time()
            repeat status = query(key.build("b1")).status until status == "succeeded" or os.time() - started > 20
            print(status)
            """], keepingStdinOpen: true)
        let first = readFirstLine(reader.standardOutput)
        #expect(String(decoding: first, as: UTF8.self) == "cancelled\n")
        try db.sql("UPDATE builds SET status = 'succeeded' WHERE id = 'b1'")
        reader.write("go\n")
        reader.closeInput()
        let finished = reader.finish(stdoutPrefix: first)
        #expect(finished.status == 0, "\(finished.stderr)")
        #expect(finished.stdout.hasSuffix("succeeded\n"), "\(finished.stdout)")
    }

    /// Keys made with the builder, fields of their values read in Lua.
    @Test(arguments: Engine.allCases) func builtKeysReadTheSameOnBothEngines(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let script = try sandbox.script("keys.lua", Self.fewRows + """

            print(query(key.build("b1")).status, query(key.project("a")).displayName)
            print(table.concat(query(key.projects.all.ids), ","), table.concat(query(key.project("a").schemes.ids), ","))
            local latest = query(key.project("a").latestBuilds(5))
            print(#latest, latest[1].id, latest[1].buildNumber)
            local detail = query(key.project("a").detail)
            print(detail.project.name, table.concat(detail.schemeIds, ","), table.concat(detail.recentBuildIds, ","))
            print(table.concat(query(key.projects.versionStrings).a, ","))
            local counts = query(key.telemetry.counts)
            print(counts.start, counts.stop)
            print(query(key.build("nope")) == nil, query('build."b2"').versionString)
            """)
        let run = try sandbox.opsh(["run", script], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == """
            queued\tApp
            a\ts1
            2\tb2\t2
            App\ts1\tb2,b1
            1.0,1.1
            2\t1
            true\t1.1

            """)
    }

    func luaString(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'"
    }
}
