//! Private Redis, Redis Cluster and PostgreSQL servers for the integration tests.
//!
//! Each is started from the installed binaries on free ports in a temporary directory, and
//! stopped (and its directory removed) when its handle drops. The PostgreSQL server is shared
//! by the whole test binary, with a fresh database per test, and stopped at process exit.
//! A missing binary fails the test with the command that installs it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a server may take to come up before the test fails.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Finds `name` on PATH (and, for PostgreSQL, in Debian's versioned directories), or panics
/// with the install hint.
pub fn binary(name: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<PathBuf> = entries.flatten().map(|e| e.path().join("bin")).collect();
        versions.sort();
        dirs.extend(versions.into_iter().rev());
    }
    for dir in dirs {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return candidate;
        }
    }
    let package = match name {
        "redis-server" | "redis-cli" => "redis-server",
        _ => "postgresql",
    };
    panic!(
        "`{name}` is not installed, and the integration tests need a real one. \
         Run `scripts/setup` (or `apt-get install -y {package}`) and try again."
    );
}

/// A port that was free a moment ago. With `with_bus`, port + 10000 (Redis Cluster's bus
/// port) was free too.
pub fn free_port(with_bus: bool) -> u16 {
    static TAKEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    for _ in 0..1000 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().expect("local addr").port();
        let mut taken = TAKEN.lock().expect("port list");
        if taken.contains(&port) {
            continue;
        }
        if with_bus {
            // The bus port must exist and be free as well.
            let Some(bus) = port.checked_add(10000) else {
                continue;
            };
            if TcpListener::bind(("127.0.0.1", bus)).is_err() || taken.contains(&bus) {
                continue;
            }
            taken.push(bus);
        }
        taken.push(port);
        return port;
    }
    panic!("no free port found");
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what} did not become ready within {START_TIMEOUT:?}");
}

fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new(binary("redis-cli"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A private `redis-server`, killed when dropped.
pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(free_port(false), &[])
    }

    fn start_with(port: u16, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir for redis");
        let mut server = Self {
            port,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let child = Command::new(binary("redis-server"))
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            // Fault tests slow the server with DEBUG SLEEP (off by default since Redis 7).
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let port = self.port;
        wait_until(&format!("redis-server on port {port}"), || {
            redis_cli(port, &["PING"]).is_some_and(|r| r.trim() == "PONG")
        });
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the process, as a crash would; the data is gone (nothing is persisted).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the process (SIGSTOP): it keeps its connections and answers nothing, as a
    /// hung server would.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let child = self.child.as_ref().expect("a running redis-server");
        let status = Command::new("kill")
            .args(["-s", name, &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -s {name}");
    }

    /// Starts the process again on the same port.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Runs a command through `redis-cli` and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.port, args).unwrap_or_else(|| panic!("redis-cli {args:?} failed"))
    }

    /// The keys matching `pattern` (`KEYS`; a private test server holds few).
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        self.cli(&["KEYS", pattern])
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The numbers of a bucket's state, in the order of the field names `fields` (the order of
    /// `lua/check.lua`'s "State"), whichever layout it was written in (a packed string or a
    /// hash); empty when the key is absent. Also returns the layout: `string` or `hash`.
    pub fn bucket_state(&self, key: &str, fields: &[&str]) -> (String, Vec<f64>) {
        const READ: &str = "local kind = redis.call('TYPE', KEYS[1]).ok \
            local values = {} \
            if kind == 'string' then \
              values = { struct.unpack('<' .. string.rep('d', #ARGV), redis.call('GET', KEYS[1])) } \
              values[#ARGV + 1] = nil \
            elseif kind == 'hash' then \
              values = redis.call('HMGET', KEYS[1], unpack(ARGV)) \
            end \
            local out = { kind } \
            for i = 1, #values do out[i + 1] = string.format('%.17g', tonumber(values[i])) end \
            return out";
        let mut args = vec!["EVAL", READ, "1", key];
        args.extend_from_slice(fields);
        let output = self.cli(&args);
        let mut lines = output.lines().map(str::trim);
        let kind = lines.next().unwrap_or_default().to_owned();
        let numbers = lines
            .map(|l| {
                l.parse()
                    .unwrap_or_else(|_| panic!("not a number: {l:?} in {output:?}"))
            })
            .collect();
        (kind, numbers)
    }

    /// `calls` and `usec_per_call` of `command` (lower case, e.g. `evalsha`) in `INFO
    /// commandstats`, since the start or the last `CONFIG RESETSTAT`; 0 when it never ran.
    pub fn command_stats(&self, command: &str) -> (u64, f64) {
        let info = self.cli(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:");
        let Some(line) = info.lines().find_map(|l| l.strip_prefix(prefix.as_str())) else {
            return (0, 0.0);
        };
        let field = |name: &str| {
            line.split(',')
                .find_map(|f| f.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_else(|| panic!("no {name} in {line}"))
        };
        (
            field("calls=").parse().expect("a count"),
            field("usec_per_call=").parse().expect("a number"),
        )
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A private Redis Cluster of three masters (with or without a replica each), stopped when
/// dropped.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Three masters, no replicas.
    pub fn start() -> Self {
        Self::start_with(0, "2000")
    }

    /// Three masters with a replica each, and a 1 s node timeout, so that a replica takes
    /// over within a few seconds of its master's death.
    pub fn start_with_replicas() -> Self {
        Self::start_with(1, "1000")
    }

    fn start_with(replicas: usize, node_timeout_ms: &str) -> Self {
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| {
                RedisServer::start_with(
                    free_port(true),
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-node-timeout",
                        node_timeout_ms,
                        // A replica may take over however long ago it last heard its master.
                        "--cluster-replica-validity-factor",
                        "0",
                    ],
                )
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new(binary("redis-cli"))
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for node in &nodes {
            wait_until("the cluster to agree", || {
                redis_cli(node.port, &["CLUSTER", "INFO"])
                    .is_some_and(|info| info.contains("cluster_state:ok"))
            });
            wait_until("replicas to sync", || {
                redis_cli(node.port, &["INFO", "replication"]).is_some_and(|info| {
                    !info.contains("role:slave") || info.contains("master_link_status:up")
                })
            });
        }
        Self { nodes }
    }

    /// The index of the node that is the master of `slot` now, from `CLUSTER SLOTS`.
    pub fn master_of(&self, slot: u16) -> usize {
        let owner = self.nodes[0].cli(&["CLUSTER", "SLOTS"]);
        // redis-cli prints ranges as: start, end, then the master's ip and port, one a line.
        let lines: Vec<&str> = owner.lines().map(str::trim).collect();
        let mut i = 0;
        while i + 3 < lines.len() {
            if let (Ok(start), Ok(end)) = (lines[i].parse::<u16>(), lines[i + 1].parse::<u16>()) {
                if (start..=end).contains(&slot) {
                    let port: u16 = lines[i + 3].parse().expect("a master's port");
                    return self
                        .nodes
                        .iter()
                        .position(|n| n.port == port)
                        .expect("the master is one of ours");
                }
            }
            i += 1;
        }
        panic!("no master for slot {slot} in {owner}");
    }

    /// Seed node URLs, as `REDIS_CLUSTER_NODES` takes them.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// A private PostgreSQL cluster (initdb + pg_ctl in a temp dir).
pub struct PostgresServer {
    pub port: u16,
    data: PathBuf,
    root: PathBuf,
    run_as_postgres: bool,
    extra_options: String,
}

impl PostgresServer {
    pub fn start() -> Self {
        Self::start_with("")
    }

    /// A server that logs every statement it runs (read with [`PostgresServer::log`]).
    pub fn start_logging_statements() -> Self {
        Self::start_with(
            "-c log_statement=all -c log_min_messages=warning -c log_line_prefix=app=%a:",
        )
    }

    fn start_with(extra_options: &str) -> Self {
        let root = tempfile::Builder::new()
            .prefix("sluice-pg-")
            .tempdir()
            .expect("temp dir for postgres")
            .keep();
        // initdb refuses to run as root; the postgres system user runs the server then.
        let run_as_postgres = is_root();
        if run_as_postgres {
            chown_to_postgres(&root);
        }
        let data = root.join("data");
        let port = free_port(false);
        let server = Self {
            port,
            data,
            root,
            run_as_postgres,
            extra_options: extra_options.to_owned(),
        };
        server.pg(
            "initdb",
            &[
                "-D",
                &server.data_str(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        server.start_process();
        server
    }

    fn data_str(&self) -> String {
        self.data.display().to_string()
    }

    fn pg(&self, tool: &str, args: &[&str]) {
        let bin = binary(tool);
        let mut cmd = if self.run_as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&bin);
            c
        } else {
            Command::new(&bin)
        };
        let out = cmd
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn start_process(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=300 {}",
            self.port,
            self.root.display(),
            self.extra_options
        );
        let log = self.root.join("postgres.log").display().to_string();
        self.pg(
            "pg_ctl",
            &[
                "-D",
                &self.data_str(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("postgres.log")).unwrap_or_default()
    }

    /// Stops the server at once, as a crash would.
    pub fn stop(&self) {
        self.pg(
            "pg_ctl",
            &["-D", &self.data_str(), "-m", "immediate", "-w", "stop"],
        );
    }

    pub fn restart(&self) {
        self.start_process();
    }

    /// The URL of database `name` on this server.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Creates a new, empty database with a unique name and returns its URL.
    pub async fn fresh_database(&self) -> String {
        use sqlx::Connection;
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&self.url("postgres"))
            .await
            .expect("connect to the private postgres");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .expect("create a test database");
        admin.close().await.expect("close");
        self.url(&name)
    }

    fn destroy(&self) {
        if self.data.join("postmaster.pid").exists() {
            let _ = std::panic::catch_unwind(|| self.stop());
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.destroy();
    }
}

static SHARED_POSTGRES: OnceLock<PostgresServer> = OnceLock::new();

/// The PostgreSQL server shared by this test binary, started on first use and stopped when
/// the process exits.
pub fn shared_postgres() -> &'static PostgresServer {
    SHARED_POSTGRES.get_or_init(|| {
        let server = PostgresServer::start();
        register_exit_cleanup();
        server
    })
}

extern "C" fn stop_shared_postgres() {
    if let Some(server) = SHARED_POSTGRES.get() {
        server.destroy();
    }
}

/// Statics are never dropped, so the shared server is stopped from an exit handler.
#[allow(unsafe_code)]
fn register_exit_cleanup() {
    // SAFETY: registers a plain `extern "C"` function with the C runtime; the function only
    // reads a `OnceLock` that is already initialised.
    let registered = unsafe { libc::atexit(stop_shared_postgres) };
    assert_eq!(registered, 0, "atexit failed");
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn chown_to_postgres(path: &Path) {
    let out = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(path)
        .output()
        .expect("chown the postgres directory");
    assert!(out.status.success(), "chown failed");
}

/// `redis-cli MONITOR` on a private Redis: every command the server runs, in order.
pub struct Monitor {
    port: u16,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Monitor {
    /// Starts watching `port` and returns once the server confirmed it (`OK`).
    pub fn start(port: u16) -> Self {
        let mut child = Command::new(binary("redis-cli"))
            .args(["-p", &port.to_string(), "MONITOR"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start redis-cli MONITOR");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("piped");
        let sink = lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                sink.lock().unwrap().push(line);
            }
        });
        let monitor = Self { port, child, lines };
        wait_until("MONITOR to start", || {
            monitor.lines.lock().unwrap().iter().any(|l| l == "OK")
        });
        monitor
    }

    /// Everything the server ran since the start, up to now: sends a marker command on
    /// another connection and waits until MONITOR reports it, so nothing earlier is missing.
    pub fn until_now(mut self) -> Vec<String> {
        let marker = format!("monitor-marker-{}", uuid::Uuid::new_v4().simple());
        redis_cli(self.port, &["ECHO", &marker]).expect("ECHO the marker");
        wait_until("MONITOR to report the marker", || {
            self.lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(&marker))
        });
        let _ = self.child.kill();
        let _ = self.child.wait();
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .take_while(|l| !l.contains(&marker))
            .skip_while(|l| *l != "OK")
            .skip(1)
            .cloned()
            .collect()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
