// The helpers every test target shares (Tests/TestSupport).
@_exported import TestSupport
