//! Every PostgreSQL advisory-lock key the code takes, in one place. Advisory locks share one
//! key space per database, so two mechanisms that picked the same number would wait on each
//! other for no reason — or, worse, one would hold the other's lock for life (an embedded
//! server's instance lock once shared its key with the database move's replicator, and a move
//! from PostgreSQL never replicated). Keys are "webook" in ASCII (`0x7765_626f_6f6b`) in the
//! high bytes and a number per use in the low ones; [`ALL`] lists them and a test keeps them
//! distinct. A new lock gets its constant here, never a literal at the call site.

/// One embedded-mode server per PostgreSQL database, held for the life of the process
/// (`instance_lock`). The bare "webook", as earlier versions took it, so an older server and
/// this one still exclude each other.
pub const INSTANCE: i64 = 0x7765_626f_6f6b;
/// One outbox relay at a time (`events::outbox`).
pub const OUTBOX_RELAY: i64 = 0x7765_626f_6f6b_0001;
/// Event-recording transactions in embedded mode, record to commit, so ids become visible in
/// order (`events::outbox`).
pub const OUTBOX_ORDER: i64 = 0x7765_626f_6f6b_0002;
/// One replicator at a time drains a database move's change log.
pub const DB_MOVE_REPLICATION: i64 = 0x7765_626f_6f6b_0003;
/// A database move's write fence: every captured write holds it shared from its first change
/// to its commit; closing the fence takes it exclusively, so it waits for writes in flight.
pub const DB_MOVE_FENCE: i64 = 0x7765_626f_6f6b_0004;

/// Every key above, with its name.
pub const ALL: &[(&str, i64)] = &[
    ("INSTANCE", INSTANCE),
    ("OUTBOX_RELAY", OUTBOX_RELAY),
    ("OUTBOX_ORDER", OUTBOX_ORDER),
    ("DB_MOVE_REPLICATION", DB_MOVE_REPLICATION),
    ("DB_MOVE_FENCE", DB_MOVE_FENCE),
];

#[cfg(test)]
mod tests {
    use super::ALL;

    #[test]
    fn every_key_is_distinct() {
        for (index, (name, key)) in ALL.iter().enumerate() {
            for (other, other_key) in &ALL[index + 1..] {
                assert_ne!(
                    key, other_key,
                    "{name} and {other} share an advisory-lock key"
                );
            }
        }
    }

    /// No advisory-lock key is written as a literal outside this registry: every source file
    /// of the workspace is searched for the common prefix.
    #[test]
    fn no_key_is_defined_elsewhere() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut offenders = Vec::new();
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|ext| ext == "rs")
                    && !path.ends_with("db/locks.rs")
                {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    if text.contains(concat!("0x7765", "_626f")) {
                        offenders.push(path.display().to_string());
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "advisory-lock keys outside the registry: {offenders:?}"
        );
    }
}
