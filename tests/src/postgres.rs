//! A private PostgreSQL cluster for the tests of the shared store: `initdb` into a temporary
//! directory and a server listening only on a Unix socket there, never as root (as root, the
//! cluster belongs to the `postgres` user the Debian packages create, and its commands run
//! through `runuser`). `.ci/run` installs the packages; elsewhere a test without them says so
//! and passes, unless `TOOLCELL_REQUIRE_POSTGRES` is set (as CI sets it), when it fails.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A running cluster, stopped when dropped.
pub struct Cluster {
    directory: tempfile::TempDir,
    bin: PathBuf,
    /// Whether its commands run as `postgres` (the tests run as root).
    as_postgres: bool,
    /// How to reach it: `host=SOCKET_DIR user=toolcell dbname=postgres`.
    pub url: String,
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`: on the `PATH`, else the newest
/// under `/usr/lib/postgresql/*/bin` (where Debian puts them).
fn binaries() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .find(|directory| directory.join("initdb").is_file() && directory.join("pg_ctl").is_file())
        // Where `initdb` really is (Debian links some of them from elsewhere), so that its
        // siblings are there too.
        .and_then(|directory| std::fs::canonicalize(directory.join("initdb")).ok())
        .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
        .filter(|directory| directory.join("psql").is_file());
    on_path.or_else(|| {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .flatten()
            .map(|entry| entry.path().join("bin"))
            .filter(|bin| bin.join("initdb").is_file())
            .collect();
        versions.sort_by_key(|bin| {
            bin.parent().and_then(Path::file_name).and_then(|name| name.to_str()).and_then(|name| name.parse::<u32>().ok()).unwrap_or(0)
        });
        versions.pop()
    })
}

impl Cluster {
    /// Start a cluster, or `None` (after saying why) when PostgreSQL is not installed and
    /// `TOOLCELL_REQUIRE_POSTGRES` is not set.
    ///
    /// # Panics
    ///
    /// If PostgreSQL is required and missing, or the cluster cannot be made or started.
    pub fn start() -> Option<Cluster> {
        let Some(bin) = binaries() else {
            assert!(
                std::env::var_os("TOOLCELL_REQUIRE_POSTGRES").is_none(),
                "PostgreSQL is required (TOOLCELL_REQUIRE_POSTGRES) but initdb was not found: install the `postgresql` package"
            );
            let _ = writeln!(
                std::io::stderr(),
                "skipped: PostgreSQL is not installed (initdb not on PATH nor under /usr/lib/postgresql); `.ci/run` installs it"
            );
            return None;
        };
        let as_postgres = rustix::process::geteuid().is_root();
        let directory = tempfile::Builder::new().prefix("tc-pg").tempdir_in("/tmp").expect("a directory for the cluster");
        if as_postgres {
            crate::run_ok(Command::new("chown").arg("postgres:").arg(directory.path()));
        }
        let cluster =
            Cluster { url: format!("host={} user=toolcell dbname=postgres", directory.path().display()), directory, bin, as_postgres };
        let data = cluster.data();
        crate::run_ok(
            &mut cluster.command("initdb", &["-D", &data, "-U", "toolcell", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"]),
        );
        cluster.resume();
        Some(cluster)
    }

    fn data(&self) -> String {
        self.directory.path().join("data").display().to_string()
    }

    /// A command of the cluster's, as its owner.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program).args(args);
            command
        } else {
            let mut command = Command::new(program);
            command.args(args);
            command
        }
    }

    /// The directory of its socket.
    pub fn socket_dir(&self) -> &Path {
        self.directory.path()
    }

    /// Stop the server at once (as if the database went away); [`resume`](Self::resume)
    /// starts it again with everything committed before.
    pub fn stop(&self) {
        crate::run_ok(&mut self.command("pg_ctl", &["-D", &self.data(), "-m", "immediate", "-w", "stop"]));
    }

    /// Start the server (again), waiting until it accepts connections.
    pub fn resume(&self) {
        let options = format!("-k {} -c listen_addresses='' -c fsync=off -c full_page_writes=off", self.directory.path().display());
        let log = self.directory.path().join("server.log").display().to_string();
        crate::run_ok(&mut self.command("pg_ctl", &["-D", &self.data(), "-l", &log, "-o", &options, "-w", "-t", "60", "start"]));
    }

    /// Make the server hang, as a database that is stopped rather than refusing: every process
    /// of it (the postmaster first, so that it starts no new one, then its children) gets
    /// SIGSTOP. Connections stay open and nothing answers until [`thaw`](Self::thaw).
    ///
    /// # Panics
    ///
    /// If the server's processes cannot be found or signalled.
    pub fn freeze(&self) {
        let pids = self.processes().expect("the server's processes");
        for pid in pids {
            rustix::process::kill_process(pid, rustix::process::Signal::STOP).expect("SIGSTOP the server");
        }
    }

    /// Let a [`freeze`](Self::freeze)n server go on (SIGCONT, children first).
    ///
    /// # Panics
    ///
    /// If the server's processes cannot be found or signalled.
    pub fn thaw(&self) {
        let pids = self.processes().expect("the server's processes");
        for pid in pids.into_iter().rev() {
            rustix::process::kill_process(pid, rustix::process::Signal::CONT).expect("SIGCONT the server");
        }
    }

    /// The postmaster (from `postmaster.pid`), then every process whose parent it is.
    fn processes(&self) -> Option<Vec<rustix::process::Pid>> {
        let recorded = std::fs::read_to_string(self.directory.path().join("data/postmaster.pid")).ok()?;
        let postmaster: i32 = recorded.lines().next().and_then(|line| line.trim().parse().ok())?;
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else {
                continue;
            };
            // `pid (name) state ppid ...`: the name may hold spaces, the fields after it do not.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let parent =
                stat.rsplit_once(')').and_then(|(_, fields)| fields.split_whitespace().nth(1)).and_then(|ppid| ppid.parse::<i32>().ok());
            if parent == Some(postmaster) {
                pids.push(pid);
            }
        }
        Some(pids.into_iter().filter_map(rustix::process::Pid::from_raw).collect())
    }

    /// Run `sql` as the cluster's superuser with `psql`, returning its output.
    ///
    /// # Panics
    ///
    /// If `psql` fails.
    pub fn psql(&self, sql: &str) -> String {
        let output = crate::run_ok(&mut self.command(
            "psql",
            &[
                "-h",
                &self.directory.path().display().to_string(),
                "-U",
                "toolcell",
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-At",
                "-c",
                sql,
            ],
        ));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A frozen server cannot stop (a test that failed while it was frozen).
        for pid in self.processes().unwrap_or_default() {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
        }
        let _ = self.command("pg_ctl", &["-D", &self.data(), "-m", "immediate", "stop"]).output();
    }
}
