//! `docs/grafana-dashboard.json` cannot drift from the code: it parses, every query names only
//! metrics that `tiered_ratelimit::observe` exports (a histogram with its `_bucket`, `_sum` and
//! `_count` series), every exported metric has a panel, and every query asks the datasource the
//! import prompts for.

use serde_json::Value;
use tiered_ratelimit::observe::{
    BLOCK_CHANGES_TOTAL, CHECKS_TOTAL, FALLBACKS_TOTAL, RECOVERIES_TOTAL, STORE_DURATION_SECONDS,
    STORE_ERRORS_TOTAL,
};

const EXPORTED: [&str; 6] = [
    CHECKS_TOTAL,
    BLOCK_CHANGES_TOTAL,
    STORE_ERRORS_TOTAL,
    FALLBACKS_TOTAL,
    RECOVERIES_TOTAL,
    STORE_DURATION_SECONDS,
];
const HISTOGRAMS: [&str; 1] = [STORE_DURATION_SECONDS];

fn dashboard() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/grafana-dashboard.json");
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every panel, those inside rows too.
fn panels(panels: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in panels.as_array().unwrap() {
        all.push(panel);
        if let Some(inner) = panel.get("panels") {
            all.extend(self::panels(inner));
        }
    }
    all
}

/// The metric names in a PromQL expression: each `tiered_ratelimit_...` identifier, a
/// histogram's series given as the histogram's name.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("tiered_ratelimit_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|base| HISTOGRAMS.contains(base))
            .unwrap_or(name);
        names.push(base.to_owned());
        rest = &tail[end..];
    }
    names
}

#[test]
fn every_query_names_only_metrics_the_crate_exports() {
    let dashboard = dashboard();
    let mut shown = Vec::new();
    for panel in panels(&dashboard["panels"]) {
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"].as_str().unwrap();
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        for target in targets {
            let expr = target["expr"].as_str().unwrap();
            let names = metric_names(expr);
            assert!(!names.is_empty(), "{title:?}: {expr} names no metric");
            for name in names {
                assert!(
                    EXPORTED.contains(&name.as_str()),
                    "{title:?}: {name} is not a metric of tiered_ratelimit::observe ({expr})"
                );
                shown.push(name);
            }
        }
    }
    for name in EXPORTED {
        assert!(shown.iter().any(|s| s == name), "no panel shows {name}");
    }
}

#[test]
fn every_query_asks_the_datasource_the_import_prompts_for() {
    let dashboard = dashboard();
    let inputs = dashboard["__inputs"].as_array().unwrap();
    assert!(inputs
        .iter()
        .any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus"));
    for panel in panels(&dashboard["panels"]) {
        for source in std::iter::once(&panel["datasource"]).chain(
            panel["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| &t["datasource"]),
        ) {
            assert_eq!(source["uid"], "${DS_PROMETHEUS}", "{}", panel["title"]);
        }
    }
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);
}

#[test]
fn the_name_scanner_reads_histogram_series_and_stops_at_braces() {
    let expr = "histogram_quantile(0.99, sum by (le) (rate(tiered_ratelimit_store_duration_seconds_bucket{backend=\"redis\"}[1m]))) / tiered_ratelimit_checks_total";
    assert_eq!(
        metric_names(expr),
        [STORE_DURATION_SECONDS, CHECKS_TOTAL].map(str::to_owned)
    );
    assert_eq!(
        metric_names("tiered_ratelimit_checks_total_bucket"),
        ["tiered_ratelimit_checks_total_bucket"],
        "a counter has no buckets"
    );
}
