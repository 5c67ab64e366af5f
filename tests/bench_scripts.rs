//! The instruction-count guard's promise (scripts/instructions.sh, docs/BENCHMARKS.md section
//! 8): a run that cannot count fails; it never passes on a count of nothing. An audit found the
//! guard printing 0 everywhere and "within budget" when the build went to `CARGO_TARGET_DIR`.
//! These run the scripts' shared parts (scripts/callgrind.sh, scripts/target-dir.sh) as the
//! guard and the bench counters do.

mod common;

use std::path::Path;
use std::process::{Command, Output};

/// `script` in bash with `set -euo pipefail` and `inherit_errexit`, as the guard runs, from
/// the repository's root.
fn bash(script: &str) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -euo pipefail; shopt -s inherit_errexit; . scripts/callgrind.sh; {script}"
        ))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("bash runs")
}

fn temp() -> String {
    common::temp_dir("bench-scripts")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_count_that_cannot_be_taken_fails_and_prints_nothing() {
    let dir = temp();
    let out = bash(&format!(
        "x=$(callgrind_per_op {dir} 10 /no/such/binary check); echo \"passed with $x\""
    ));
    assert!(
        !out.status.success(),
        "a missing binary must fail the count"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("passed"),
        "nothing after a failed count runs"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/binary"));
    std::fs::remove_dir_all(dir).ok();
}

/// A program whose count does not grow with N (it ignores its arguments) is no count per
/// iteration: the guard refuses it rather than print 0. Needs valgrind, as the guard does.
#[test]
fn a_count_that_does_not_grow_with_n_fails() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("valgrind is not installed: skipped (CI installs it)");
        return;
    }
    let dir = temp();
    let total = bash(&format!("callgrind_total {dir} /bin/true"));
    assert!(total.status.success(), "{total:?}");
    let n: u64 = String::from_utf8_lossy(&total.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(n > 0, "callgrind counts /bin/true's instructions");
    let out = bash(&format!(
        "x=$(callgrind_per_op {dir} 10 /bin/true check); echo \"passed with $x\""
    ));
    assert!(!out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a count per iteration"));
    std::fs::remove_dir_all(dir).ok();
}

/// The scripts read their binaries where cargo put them: `CARGO_TARGET_DIR` when set.
#[test]
fn the_scripts_look_for_binaries_where_cargo_builds_them() {
    let run = |target: Option<&str>| {
        let mut command = Command::new("scripts/target-dir.sh");
        command.current_dir(env!("CARGO_MANIFEST_DIR"));
        command.env_remove("CARGO_TARGET_DIR");
        if let Some(target) = target {
            command.env("CARGO_TARGET_DIR", target);
        }
        let out = command.output().expect("target-dir.sh runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    assert_eq!(run(Some("/tmp/elsewhere")), "/tmp/elsewhere");
    let default = run(None);
    assert!(Path::new(&default).is_absolute(), "{default}");
}
