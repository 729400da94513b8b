//! Three real processes (`scheduler-probe`) run the same `@every 1s` job under one Redis long lock
//! for about 20 s. Each appends `<tick ms> <fencing token> <pid>` per run to its own log. The test
//! kills the lock holder with SIGKILL half-way and checks, from the logs:
//! - no tick ran on two processes, and every second had its run while someone held the lock;
//! - the holder's last tick and the successor's first are at most ttl + 1 s apart after the kill;
//! - fencing tokens never decrease over time and the successor's is greater;
//! - the survivors stop cleanly on SIGTERM (exit status 0).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use crate::common::{redis_url, unique_prefix, wait_until};

const TTL: Duration = Duration::from_secs(3);
const PROCESSES: usize = 3;

struct Probe {
    child: Child,
    log: PathBuf,
}

fn start_probe(dir: &Path, index: usize, prefix: &str) -> Probe {
    let log = dir.join(format!("runs-{index}.log"));
    let child = Command::new(env!("CARGO_BIN_EXE_scheduler-probe"))
        .arg(format!("redis={}", redis_url()))
        .arg(format!("prefix={prefix}"))
        .arg("job=tick")
        .arg("schedule=@every 1s")
        .arg("guard=long")
        .arg(format!("ttl={}ms", TTL.as_millis()))
        .arg(format!("log={}", log.display()))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start scheduler-probe");
    Probe { child, log }
}

#[derive(Debug, Clone, Copy)]
struct Run {
    tick: i64,
    token: u64,
    pid: u32,
}

fn read_runs(probes: &[Probe]) -> Vec<Run> {
    let mut runs = Vec::new();
    for probe in probes {
        let Ok(text) = std::fs::read_to_string(&probe.log) else {
            continue;
        };
        for line in text.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            assert_eq!(fields.len(), 3, "malformed run log line {line:?}");
            runs.push(Run {
                tick: fields[0].parse().unwrap(),
                token: fields[1].parse().unwrap(),
                pid: fields[2].parse().unwrap(),
            });
        }
    }
    runs.sort_by_key(|run| run.tick);
    runs
}

fn wall_millis() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn assert_every_second_between(runs: &[Run], first: i64, last: i64, what: &str) {
    let ticks: Vec<i64> = runs
        .iter()
        .map(|run| run.tick)
        .filter(|tick| (first..=last).contains(tick))
        .collect();
    let expected: Vec<i64> = (0..=(last - first) / 1000)
        .map(|i| first + i * 1000)
        .collect();
    assert_eq!(ticks, expected, "{what}: a second without its run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_runs_each_tick_and_a_killed_holder_is_replaced_within_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique_prefix();
    let mut probes: Vec<Probe> = (0..PROCESSES)
        .map(|index| start_probe(dir.path(), index, &prefix))
        .collect();

    // Let the first holder run for ~9 s.
    wait_until("nine runs by the first holder", || {
        let count = read_runs(&probes).len();
        async move { count >= 9 }
    })
    .await;
    let before_kill = read_runs(&probes);
    let holder_pid = before_kill.last().unwrap().pid;
    let holder = probes
        .iter()
        .position(|probe| probe.child.id() == holder_pid)
        .expect("the holder is one of ours");
    probes[holder].child.kill().unwrap(); // SIGKILL: no release, no goodbye
    let killed_at = wall_millis();
    probes[holder].child.wait().unwrap();

    // Another ~10 s with the survivors.
    wait_until("ten runs after the kill", || {
        let count = read_runs(&probes)
            .iter()
            .filter(|run| run.pid != holder_pid)
            .count();
        async move { count >= 10 }
    })
    .await;
    for (index, probe) in probes.iter_mut().enumerate() {
        if index == holder {
            continue;
        }
        let status = Command::new("kill")
            .args(["-TERM", &probe.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = probe.child.wait().unwrap();
        assert!(
            exit.success(),
            "probe {index} exited with {exit} on SIGTERM"
        );
    }

    let runs = read_runs(&probes);
    let mut by_tick: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
    for run in &runs {
        by_tick.entry(run.tick).or_default().push(run.pid);
    }
    let doubled: Vec<_> = by_tick.iter().filter(|(_, pids)| pids.len() > 1).collect();
    assert!(
        doubled.is_empty(),
        "ticks run on two processes: {doubled:?}"
    );
    assert!(
        runs.windows(2).all(|pair| pair[0].token <= pair[1].token),
        "fencing tokens went backwards: {runs:?}"
    );

    let (old, new): (Vec<Run>, Vec<Run>) = runs.iter().partition(|run| run.pid == holder_pid);
    let old_last = old.last().unwrap();
    let new_first = new.first().expect("a survivor took over");
    assert!(
        new.iter().all(|run| run.pid == new_first.pid),
        "one successor: {new:?}"
    );
    assert!(new_first.token > old_last.token);
    assert_every_second_between(&runs, old[0].tick, old_last.tick, "first holder");
    assert_every_second_between(&runs, new_first.tick, new.last().unwrap().tick, "successor");
    let ttl_millis = i64::try_from(TTL.as_millis()).unwrap();
    assert!(
        new_first.tick <= killed_at + ttl_millis + 1000,
        "handover took {} ms after the kill (ttl {} ms)",
        new_first.tick - killed_at,
        ttl_millis
    );
    assert!(new_first.tick > old_last.tick);
}
