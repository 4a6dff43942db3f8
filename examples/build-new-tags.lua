-- build-new-tags.lua — queue a build of every version tag that has none yet.
--
-- When: from cron, every few minutes or hourly, so that each release tag
-- pushed to a project's repository gets built without anyone asking.
--
-- What: for every project (or the one named by the first argument), reads
-- the semantic-version tags of its gitRepositoryURL (a local path or a
-- remote URL; git.versions), and for EVERY scheme of the project queues a
-- build (jobs.create) of each tag for which that scheme has no build yet —
-- of any status: a failed build of a tag is not retried (delete it, or
-- jobs.start a new one, to try again). Every scheme, because a project's
-- schemes are different products of the same tag (the app, its tests, its
-- documentation). The build's version is the tag's name ("v1.2.0"), which
-- is what the runner checks out; a build recorded under the bare version
-- ("1.2.0") counts too. Pre-release tags (1.3.0-rc.1) are versions and are
-- built as well.
-- The builds are only queued: whatever runs queued builds (the backend, or
-- `jobs.start(id)` in an opsh that stays up) picks them up.
--
-- Run:   opsh run [--db FILE] [--dry-run] build-new-tags.lua [PROJECT]
--        --dry-run lists what it would queue and queues nothing.
-- Cron:  */15 * * * *  opsh run --db /var/lib/opsh/opsh.sqlite /opt/opsh/examples/build-new-tags.lua >>/var/log/opsh/tags.log 2>&1
--
-- Output: one line per queued build and a summary on stdout; projects whose
-- repository cannot be read on stderr.
-- Exit:  0  done: every new tag queued, or none was new
--        1  error (builds queued before it stay queued)
--        2  PROJECT does not exist
--        3  database unavailable; 75 another run holds the script's lock
--        4  some repositories could not be read (the other projects were done)

local DRY_RUN = db.inTransaction() -- `opsh run --dry-run` runs the script in one transaction

local function warn(message) io.stderr:write("build-new-tags: ", message, "\n") end

local selected
if arg[1] then
  local project = projects.get(arg[1])
  if not project then
    warn("no project " .. arg[1])
    os.exit(2)
  end
  selected = { project }
else
  selected = projects.list{ order = "bundleIdentifier" }
end

local queued, unreadable, noSchemes = 0, 0, 0
for _, project in ipairs(selected) do
  local schemeRows = schemes.list(project.bundleIdentifier)
  if #schemeRows == 0 then
    noSchemes = noSchemes + 1
  elseif project.gitRepositoryURL == "" then
    warn(project.bundleIdentifier .. ": no git repository")
    unreadable = unreadable + 1
  else
    local ok, versions = pcall(git.versions, project.gitRepositoryURL)
    if not ok then
      warn(project.bundleIdentifier .. ": cannot read the tags of " .. project.gitRepositoryURL .. ": " .. tostring(versions))
      unreadable = unreadable + 1
    else
      for _, scheme in ipairs(schemeRows) do
        for _, version in ipairs(versions) do
          local built = db.value("SELECT count(*) FROM builds WHERE schemeId = ? AND versionString IN (?, ?)",
                                 scheme.id, version.tag, version.version)
          if built == 0 then
            if DRY_RUN then
              -- jobs.create is refused in a dry run; builds.create writes the
              -- same queued row inside the dry run's transaction (rolled back),
              -- so that the dry run's summary counts it.
              builds.create(scheme.id, version.tag)
              print(string.format("would queue: %s %s %s", project.bundleIdentifier, scheme.name, version.tag))
            else
              local build = jobs.create{ scheme = scheme.id, version = version.tag }
              print(string.format("queued: %s %s %s (build %s #%d)", project.bundleIdentifier, scheme.name,
                                  version.tag, build.id, build.buildNumber))
            end
            queued = queued + 1
          end
        end
      end
    end
  end
end

print(string.format("build-new-tags: %d build(s) %s for %d project(s)%s%s", queued,
  DRY_RUN and "would be queued" or "queued", #selected,
  noSchemes > 0 and string.format(", %d without schemes", noSchemes) or "",
  unreadable > 0 and string.format(", %d unreadable (see stderr)", unreadable) or ""))
if unreadable > 0 then os.exit(4) end
