//! What benchmarks read about a process from /proc: its resident memory
//! and the CPU time it used.

use std::process::Command;
use std::sync::OnceLock;

/// VmRSS in KiB; 0 once the process is gone.
pub fn rss_kib(pid: u32) -> u64 {
    rss(pid).total_kib
}

/// A process's resident memory, from one read of /proc/<pid>/status; 0s
/// once the process is gone.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rss {
    pub total_kib: u64,
    /// Anonymous memory: heap and stacks.
    pub anon_kib: u64,
    /// File pages: the mapped binary and libraries.
    pub file_kib: u64,
}

pub fn rss(pid: u32) -> Rss {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Rss {
        total_kib: field("VmRSS"),
        anon_kib: field("RssAnon"),
        file_kib: field("RssFile"),
    }
}

/// User plus system CPU time so far, in seconds; 0 once the process is gone.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command may hold spaces; utime and stime are the 14th and 15th
    // fields, the 12th and 13th after it.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / clock_ticks_per_second()
}

/// `getconf CLK_TCK`: the unit of /proc's CPU times.
fn clock_ticks_per_second() -> f64 {
    static HZ: OnceLock<f64> = OnceLock::new();
    *HZ.get_or_init(|| {
        let out = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .expect("running getconf CLK_TCK");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("getconf CLK_TCK prints a number")
    })
}
