import Foundation
import Testing
import TestSupport
@testable import PostgresWire

/// Logins over TCP to a second throwaway server whose pg_hba.conf asks each
/// role for its password by one method (PostgresPasswordServer).
@Suite struct AuthenticationTests {
    @Test(arguments: PostgresPasswordServer.roles.map(\.name))
    func rightPasswordLogsInWrongOneIsRefused(role: String) throws {
        let server = try PostgresPasswordServer.shared()
        let password = PostgresPasswordServer.roles.first { $0.name == role }!.password
        // The right password: logged in as the role, over TCP.
        let connection = try PostgresConnection(url: server.tcpURL(user: role, password: password))
        #expect(try connection.query("SELECT current_user, inet_client_addr()::text").rows == [[.text(role), .text("127.0.0.1/32")]])
        // The method really was the one pg_hba.conf names.
        let method = PostgresPasswordServer.roles.first { $0.name == role }!.method
        #expect(try server.sql("SELECT auth_method FROM pg_hba_file_rules WHERE '\(role)' = ANY(user_name)") == method)
        connection.close()
        // A wrong password: refused by the server, 28P01.
        do {
            _ = try PostgresConnection(url: server.tcpURL(user: role, password: "wrong"))
            Issue.record("a wrong password was accepted for \(role)")
        } catch let error as PostgresError {
            #expect(error.code == "28P01")
            #expect(error.severity == "FATAL")
            #expect(error.message == "password authentication failed for user \"\(role)\"")
        }
        // No password at all: the client says none was given, and where one may be.
        #expect { _ = try PostgresConnection(url: server.tcpURL(user: role, password: nil)) } throws: { error in
            "\(error)".contains("the server asks role \"\(role)\" for a password") && "\(error)".contains("none was given")
                && "\(error)".contains("PGPASSWORD, or a line in the password file")
        }
    }

    @Test func aRoleWithoutAHostLineIsRejectedByTheServer() throws {
        let server = try PostgresPasswordServer.shared()
        #expect { _ = try PostgresConnection(url: server.tcpURL(user: "nobody_here", password: "x")) } throws: {
            ($0 as? PostgresError)?.code == "28000"
        }
    }

    /// A Unix socket is never encrypted, whatever sslmode says: libpq does
    /// not ask for TLS there either (only the socket's owner reaches it).
    @Test func aUnixSocketConnectsInClearTextWithEverySslmode() throws {
        let url = try PostgresServer.shared().url
        for mode in ["disable", "allow", "prefer", "require"] {
            let connection = try PostgresConnection(url: url + "&sslmode=\(mode)")
            #expect(!connection.isEncrypted)
            #expect(try connection.query("SELECT 1").scalar == .integer(1))
        }
    }

    @Test func unreachableServerSaysWhere() throws {
        #expect { _ = try PostgresConnection(url: "postgresql://u@/opsh?host=/nonexistent-folder") } throws: {
            "\($0)" == "could not connect to PostgreSQL: /nonexistent-folder/.s.PGSQL.5432: No such file or directory"
        }
        let port = try PostgresPasswordServer.freePort()
        #expect { _ = try PostgresConnection(url: "postgresql://u@127.0.0.1:\(port)/opsh") } throws: {
            "\($0)" == "could not connect to PostgreSQL: 127.0.0.1:\(port): Connection refused"
        }
    }

    @Test func unknownDatabaseIsTheServersError() throws {
        let url = try PostgresServer.shared().url.replacingOccurrences(of: "/opsh?", with: "/no_such_db?")
        #expect { _ = try PostgresConnection(url: url) } throws: { ($0 as? PostgresError)?.code == "3D000" }
    }
}
