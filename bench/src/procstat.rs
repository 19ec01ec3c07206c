//! CPU time and memory of processes, read from `/proc/<pid>/stat` (utime + stime, in clock ticks)
//! and `/proc/<pid>/status` (VmHWM = peak resident set size, VmRSS).

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// `(ppid, utime + stime in ticks)` of a process, or `None` when it is gone.
fn stat(pid: i32) -> Option<(i32, u64)> {
    stat_fields(pid).map(|(ppid, utime, stime)| (ppid, utime + stime))
}

/// `(ppid, utime, stime)` (ticks) of a process.
fn stat_fields(pid: i32) -> Option<(i32, u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces: parse after the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); ppid is field 4, utime 14, stime 15.
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((ppid, utime, stime))
}

/// Per thread of a process: `(name, user and system CPU seconds, voluntary + involuntary
/// context switches)`, from `/proc/<pid>/task/*`; how often each thread slept and woke up.
pub fn threads(pid: i32) -> Vec<(String, f64, f64, u64)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in dir.flatten() {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        let switches: u64 = status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        let (user, system) = std::fs::read_to_string(path.join("stat"))
            .ok()
            .and_then(|s| {
                let f: Vec<String> = s[s.rfind(')')? + 2..]
                    .split_whitespace()
                    .map(String::from)
                    .collect();
                Some((
                    f.get(11)?.parse::<u64>().ok()?,
                    f.get(12)?.parse::<u64>().ok()?,
                ))
            })
            .unwrap_or((0, 0));
        let tck = clk_tck();
        out.push((
            name.trim().to_string(),
            user as f64 / tck,
            system as f64 / tck,
            switches,
        ));
    }
    out.sort_by(|a, b| (b.1 + b.2).total_cmp(&(a.1 + a.2)));
    out
}

/// `(user, system)` CPU seconds a process has used so far.
pub fn user_system_seconds(pid: i32) -> Option<(f64, f64)> {
    let tck = clk_tck();
    stat_fields(pid).map(|(_, u, s)| (u as f64 / tck, s as f64 / tck))
}

/// Process state letter (R, S, D, Z, ...), `None` when there is no such process.
pub fn state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 2..].chars().next()
}

/// CPU seconds (user + system) a process has used so far.
pub fn cpu_seconds(pid: i32) -> Option<f64> {
    stat(pid).map(|(_, t)| t as f64 / clk_tck())
}

fn status_kb(pid: i32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// `(voluntary, involuntary)` context switches of a single-threaded process so far: how often
/// it slept waiting (a walsender: on its socket or latch) and how often it was preempted.
pub fn ctxt_switches(pid: i32) -> Option<(u64, u64)> {
    Some((
        status_kb(pid, "voluntary_ctxt_switches:")?,
        status_kb(pid, "nonvoluntary_ctxt_switches:")?,
    ))
}

/// Peak resident set size (VmHWM) in KiB.
pub fn peak_rss_kb(pid: i32) -> Option<u64> {
    status_kb(pid, "VmHWM:")
}

/// CPU ticks of `parent` and its children (`/proc/<pid>/task/<pid>/children`): the PostgreSQL
/// postmaster and its backends, walsenders and auxiliary processes.
fn tree_ticks(parent: i32) -> HashMap<i32, u64> {
    let mut out = HashMap::new();
    if let Some((_, t)) = stat(parent) {
        out.insert(parent, t);
    }
    let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .unwrap_or_default();
    for pid in children
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        if let Some((_, t)) = stat(pid) {
            out.insert(pid, t);
        }
    }
    out
}

/// One sample of everything watched.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds since the sampler started.
    pub t: f64,
    /// CPU seconds of each watched process (missing once it exited).
    pub cpu: HashMap<String, f64>,
    /// CPU seconds of the PostgreSQL process tree, counting every pid seen since the start
    /// (a backend that exits keeps its last value).
    pub pg_cpu: f64,
    /// Peak RSS (KiB) of each watched process.
    pub hwm_kb: HashMap<String, u64>,
    /// Busy CPU seconds of the whole machine (all cores; /proc/stat without idle and iowait).
    pub machine_cpu: f64,
}

/// Busy ticks of the whole machine from the first line of /proc/stat.
fn machine_ticks() -> u64 {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = s
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    [0usize, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| f.get(i))
        .sum()
}

/// Busy CPU seconds of the whole machine so far (all cores).
pub fn machine_cpu_seconds() -> f64 {
    machine_ticks() as f64 / clk_tck()
}

/// Samples named processes every `period` on a background thread.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    pub started: Instant,
    samples: Arc<Mutex<Vec<Sample>>>,
    watch: Arc<Mutex<HashMap<String, i32>>>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `initial` (name, pid) and, if given, the postmaster's process tree.
    pub fn start(postmaster: Option<i32>, initial: &[(&str, i32)], period: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let watch: Arc<Mutex<HashMap<String, i32>>> = Arc::new(Mutex::new(
            initial.iter().map(|(n, p)| (n.to_string(), *p)).collect(),
        ));
        let started = Instant::now();
        let (s2, v2, w2) = (stop.clone(), samples.clone(), watch.clone());
        let handle = thread::spawn(move || {
            let tck = clk_tck();
            let mut pg_seen: HashMap<i32, u64> = HashMap::new();
            let pg_base: HashMap<i32, u64> = postmaster.map(tree_ticks).unwrap_or_default();
            let machine_base = machine_ticks();
            loop {
                let mut smp = Sample {
                    t: started.elapsed().as_secs_f64(),
                    ..Default::default()
                };
                smp.machine_cpu = machine_ticks().saturating_sub(machine_base) as f64 / tck;
                let watched: Vec<(String, i32)> = w2
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), *v))
                    .collect();
                for (name, pid) in watched {
                    if let Some(c) = cpu_seconds(pid) {
                        smp.cpu.insert(name.clone(), c);
                    }
                    if let Some(h) = peak_rss_kb(pid) {
                        smp.hwm_kb.insert(name, h);
                    }
                }
                if let Some(pm) = postmaster {
                    for (pid, t) in tree_ticks(pm) {
                        pg_seen.insert(pid, t);
                    }
                    let ticks: u64 = pg_seen
                        .iter()
                        .map(|(pid, t)| t.saturating_sub(*pg_base.get(pid).unwrap_or(&0)))
                        .sum();
                    smp.pg_cpu = ticks as f64 / tck;
                }
                v2.lock().unwrap().push(smp);
                if s2.load(Ordering::Relaxed) {
                    break;
                }
                thread::sleep(period);
            }
        });
        Sampler {
            stop,
            started,
            samples,
            watch,
            handle: Some(handle),
        }
    }

    /// Adds (or replaces) a process to watch under `name`.
    pub fn watch(&self, name: &str, pid: i32) {
        self.watch.lock().unwrap().insert(name.to_string(), pid);
    }

    /// Seconds since the sampler started.
    pub fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The latest sample taken at or before `t` (or the first one).
    pub fn at(&self, t: f64) -> Sample {
        let v = self.samples.lock().unwrap();
        v.iter()
            .rev()
            .find(|s| s.t <= t)
            .or_else(|| v.first())
            .cloned()
            .unwrap_or_default()
    }

    /// The highest VmHWM seen for `name` (KiB), also after the process exited.
    pub fn peak_rss_kb(&self, name: &str) -> Option<u64> {
        self.samples
            .lock()
            .unwrap()
            .iter()
            .filter_map(|s| s.hwm_kb.get(name).copied())
            .max()
    }

    /// Stops sampling (after one final sample) and returns all samples.
    pub fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        std::mem::take(&mut *self.samples.lock().unwrap())
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// CPU seconds of every process watched under a name starting with `prefix` between two
/// samples; a process that exited counts with the last value seen before `b`.
pub fn cpu_prefix_between(samples: &[Sample], a: f64, b: f64, prefix: &str) -> f64 {
    let mut last: HashMap<&str, (f64, f64)> = HashMap::new(); // name -> (value at a, last value <= b)
    for s in samples.iter().filter(|s| s.t <= b) {
        for (k, v) in s.cpu.iter().filter(|(k, _)| k.starts_with(prefix)) {
            let e = last.entry(k.as_str()).or_insert((0.0, 0.0));
            if s.t <= a {
                e.0 = *v;
            }
            e.1 = *v;
        }
    }
    last.values().map(|(x, y)| (y - x).max(0.0)).sum()
}

/// CPU seconds of `name` between two samples (0 when it was not seen).
pub fn cpu_between(a: &Sample, b: &Sample, name: &str) -> f64 {
    let end = b.cpu.get(name).copied().unwrap_or(0.0);
    let start = a.cpu.get(name).copied().unwrap_or(0.0);
    (end - start).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_cpu_is_bounded_by_wall_time_times_cores() {
        let s = Sampler::start(
            None,
            &[("me", std::process::id() as i32)],
            Duration::from_millis(50),
        );
        // Burn 0.5 s of this process's own CPU (not of wall time: the machine may be busy).
        let own_cpu = || {
            let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
            let f: Vec<&str> = stat
                .rsplit_once(')')
                .unwrap()
                .1
                .split_whitespace()
                .collect();
            (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
        };
        let (start, t0) = (own_cpu(), Instant::now());
        while own_cpu() - start < 0.5 && t0.elapsed() < Duration::from_secs(20) {}
        thread::sleep(Duration::from_millis(300));
        let v = s.finish();
        let last = v.last().unwrap();
        let cores = std::thread::available_parallelism().unwrap().get() as f64;
        eprintln!(
            "t={} machine={} me={:?}",
            last.t,
            last.machine_cpu,
            last.cpu.get("me")
        );
        assert!(last.machine_cpu <= last.t * cores + 0.05);
        assert!(*last.cpu.get("me").unwrap() >= 0.4);
    }
}
