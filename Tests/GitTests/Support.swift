import Foundation

/// A repository with history: commits on main tagged as versions (some
/// annotated), tags that are not versions, and a `feature` branch.
///
///     1.0.0  v1.2.0(annotated)  1.9.0  1.10.0  2.0.0-beta.1  2.0.0(annotated)
///     release-foo  v1.2  latest           (not versions)
///     main (current): version.txt = "2.0.0"; feature: version.txt = "feature"
func makeRepository(in directory: TemporaryDirectory, name: String = "repo") throws -> String {
    let path = directory.file(name)
    try sh("""
        set -e
        git init -q -b main '\(path)'
        cd '\(path)'
        commit() { echo "$1" > version.txt; git add version.txt; git commit -q -m "version $1"; }
        commit 1.0.0;        git tag 1.0.0
        commit 1.2.0;        git tag -a v1.2.0 -m "release 1.2.0"; git tag v1.2
        commit 1.9.0;        git tag 1.9.0
        commit 1.10.0;       git tag 1.10.0; git tag release-foo
        commit 2.0.0-beta.1; git tag 2.0.0-beta.1
        commit 2.0.0;        git tag -a 2.0.0 -m "release 2.0.0"; git tag latest
        git checkout -q -b feature
        commit feature
        git checkout -q main
        """)
    return path
}
