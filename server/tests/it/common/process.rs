//! A server process started for a test or a benchmark, killed (by its pid)
//! when dropped, and `/healthz` read. Shared by the tests (`common`, and
//! the crash tests, include this file by path) and the benches.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A child process and the URL it serves.
pub struct Process {
    pub child: Child,
    pub url: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Process {
    /// A process the caller started, serving at `url`.
    #[allow(dead_code)]
    pub fn of(child: Child, url: String) -> Process {
        Process {
            child,
            url,
            lines: Arc::default(),
        }
    }

    /// Starts `ctxlog-server` (at `binary`) listening on a free loopback
    /// port, with `args` after `--listen`, and waits (bounded) for the log
    /// line that names the address it bound.
    #[allow(dead_code)]
    pub fn ctxlog_server(binary: &str, args: &[&std::ffi::OsStr], log: &str) -> Process {
        Self::with_env(binary, args, log, &[])
    }

    /// This package's `ctxlog-server` on the store at `dir` with the
    /// scripted agent of the file `script`, `more` arguments after them,
    /// logging its own info lines (the benches' servers).
    #[allow(dead_code)]
    pub fn scripted(dir: &std::path::Path, script: &std::path::Path, more: &[&str]) -> Process {
        let agent = format!("scripted:{}", script.display());
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "--dir".as_ref(),
            dir.as_os_str(),
            "--agent".as_ref(),
            agent.as_ref(),
        ];
        args.extend(more.iter().map(std::ffi::OsStr::new));
        Self::ctxlog_server(
            env!("CARGO_BIN_EXE_ctxlog-server"),
            &args,
            "warn,ctxlog_server=info",
        )
    }

    /// [`ctxlog_server`](Self::ctxlog_server) with these environment
    /// variables set too.
    pub fn with_env(
        binary: &str,
        args: &[&std::ffi::OsStr],
        log: &str,
        env: &[(&str, &str)],
    ) -> Process {
        let mut command = Command::new(binary);
        command
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied());
        Self::spawn(command, log)
    }

    /// Runs `command`, which starts a server listening on a free loopback
    /// port (in its own process: a wrapper must `exec` it), and waits
    /// (bounded) for the log line that names the address it bound.
    pub fn spawn(mut command: Command, log: &str) -> Process {
        let mut child = command
            .env("RUST_LOG", log)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let kept = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("address=") {
                    let addr: String = line[at + 8..]
                        .chars()
                        .take_while(|c| !c.is_whitespace())
                        .collect();
                    let _ = tx.send(addr);
                }
                kept.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => addr,
            Err(e) => {
                // Not left running when the test fails.
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server never logged its address: {e}");
            }
        };
        Process {
            child,
            url: format!("http://{addr}"),
            lines,
        }
    }

    /// The lines the server has logged so far.
    #[allow(dead_code)]
    pub fn log(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits (at most `limit`) for the process to exit by itself; whether
    /// it did.
    #[allow(dead_code)]
    pub fn exited_within(&mut self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Sends the signal `name` (`TERM`, `USR1`, ...) to the process, by its
    /// pid.
    #[allow(dead_code)]
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{name} failed");
    }

    /// SIGKILL: no shutdown, no checkpoint, no goodbye.
    #[allow(dead_code)]
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CPU time (user and system) a process has used so far, from
/// `/proc/PID/stat` (Linux; `None` elsewhere).
#[allow(dead_code)]
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is the
    // first, utime and stime the 12th and 13th.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let per_second = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(100);
    Some(Duration::from_secs_f64(ticks as f64 / per_second as f64))
}

/// A process's anonymous resident memory (`RssAnon`: the mapped log's
/// pages are the page cache's, not the process's), in bytes.
#[allow(dead_code)]
pub fn rss_anon(pid: u32) -> u64 {
    status_kb(pid, "RssAnon:")
}

/// A process's whole resident memory (`VmRSS`: its heap and the pages of
/// the files it maps that are in memory), in bytes.
#[allow(dead_code)]
pub fn rss_total(pid: u32) -> u64 {
    status_kb(pid, "VmRSS:")
}

/// A `/proc/PID/status` field given in kB, in bytes.
fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("RssAnon in /proc/PID/status");
    kb << 10
}

/// What a bench runs its clients on: a runtime of 2 workers (the
/// machine's cores).
#[allow(dead_code)]
pub fn bench_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Whether `CTXLOG_BENCH_QUICK` asks a bench for its short form.
#[allow(dead_code)]
pub fn quick() -> bool {
    std::env::var_os("CTXLOG_BENCH_QUICK").is_some()
}

/// Whether a bench runs its table `table`: every table unless
/// `CTXLOG_BENCH_ONLY` names one.
#[allow(dead_code)]
pub fn runs(table: &str) -> bool {
    std::env::var("CTXLOG_BENCH_ONLY")
        .ok()
        .is_none_or(|only| only == table)
}

/// The sample at quantile `q` of `sorted` (ascending; zero when empty).
#[allow(dead_code)]
pub fn quantile(sorted: &[std::time::Duration], q: f64) -> std::time::Duration {
    let at = ((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(at).copied().unwrap_or_default()
}

/// A JSON-RPC call of `method` to the server at `url`: its result (a
/// panic naming the error, if it answered one).
#[allow(dead_code)]
pub async fn rpc(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    let answer = try_rpc(http, url, method, params)
        .await
        .unwrap_or_else(|| panic!("{method}: no answer"));
    assert!(answer.get("error").is_none(), "{method}: {answer}");
    answer["result"].clone()
}

/// A JSON-RPC call of `method` to the server at `url`: the whole answer
/// (a result or an error), or `None` if the server did not answer (it
/// was killed, or is paused past the client's timeout).
#[allow(dead_code)]
pub async fn try_rpc(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    params: serde_json::Value,
) -> Option<serde_json::Value> {
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let text = http
        .post(format!("{url}/"))
        .header("A2A-Version", "1.0")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    Some(serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
}

/// `GET /healthz`: its status and its JSON.
#[allow(dead_code)]
pub async fn health(url: &str) -> (u16, serde_json::Value) {
    probe(url, "/healthz").await
}

/// `GET` of a probe (`/healthz`, `/livez`, `/readyz`), with no token: its
/// status and its JSON.
#[allow(dead_code)]
pub async fn probe(url: &str, path: &str) -> (u16, serde_json::Value) {
    let r = reqwest::get(format!("{url}{path}")).await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap())
}
