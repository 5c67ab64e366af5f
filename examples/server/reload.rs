//! `--config FILE`: the file read at start, and again on every SIGHUP.

use tiered_ratelimit::{RateLimitConfig, RateLimiter};

/// The config in `path` (TOML, the serde form), or why not, naming the field at fault. A file
/// that sets nothing (empty, comments only, or tables with nothing in them) is refused: it is most often one caught while
/// an editor or a deploy rewrites it, and it would switch every tier off. A config meant to do
/// that says so.
pub(crate) fn load(path: &std::path::Path) -> Result<RateLimitConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // Tables hold settings; one with no value anywhere in it (`[routes]`, or a route's header
    // with nothing under it yet) sets nothing.
    fn sets_something(value: &toml::Value) -> bool {
        match value {
            toml::Value::Table(table) => table.values().any(sets_something),
            _ => true,
        }
    }
    if toml::from_str::<toml::Table>(&text).is_ok_and(|t| !t.values().any(sets_something)) {
        return Err(format!(
            "{}: the file sets nothing (caught while it was being written?); to switch every \
             tier off, write user_limit = 0, endpoint_limit = 0 and global_limit = 0",
            path.display()
        ));
    }
    toml::from_str(&text).map_err(|e| {
        // Name the key of the line the error points into (the text before its `=`): the span
        // starts at a bad value, or at the start of an unknown or duplicate key's line. A key
        // inside a table is named with the table's (`redis.time_source`).
        let key = e
            .span()
            .and_then(|span| {
                let start = text.get(..span.start)?.rfind('\n').map_or(0, |i| i + 1);
                let key = key_of_line(text.get(start..)?.lines().next()?)?;
                if text[start..].trim_start().starts_with('[') {
                    return Some(key.to_owned());
                }
                let table = text[..start]
                    .lines()
                    .rev()
                    .find(|l| l.trim_start().starts_with('['))
                    .and_then(key_of_line);
                Some(match table {
                    Some(table) => format!("{table}.{key}"),
                    None => key.to_owned(),
                })
            })
            .filter(|key| !key.is_empty() && !e.message().starts_with(key.as_str()));
        match key {
            Some(key) => format!("{}: {key}: {}", path.display(), e.message()),
            None => format!("{}: {}", path.display(), e.message()),
        }
    })
}

/// The key a TOML line sets: the text before its first `=` outside quotes (`"a=b" = 1` sets
/// `"a=b"`), or a table header's name (`[routes."/a=b"]`).
fn key_of_line(line: &str) -> Option<&str> {
    let line = line.trim();
    if let Some(header) = line.strip_prefix('[') {
        let header = header.trim_start_matches('[');
        let end = header.rfind(']').unwrap_or(header.len());
        return Some(header[..end].trim_end_matches(']').trim());
    }
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '=') => return Some(line[..i].trim()),
            _ => {}
        }
    }
    None
}

/// The top-level settings that differ, as `name: old -> new`; a setting the serde form leaves
/// out (an empty list, no Redis) shows as `(default)`.
fn changes(old: &RateLimitConfig, new: &RateLimitConfig) -> Vec<String> {
    let (old, new) = (serde_json::json!(old), serde_json::json!(new));
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return Vec::new();
    };
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let shown = |value: Option<&serde_json::Value>| match value {
        Some(value) => value.to_string(),
        None => "(default)".to_owned(),
    };
    keys.into_iter()
        .filter_map(|key| {
            let (a, b) = (old.get(key), new.get(key));
            (a != b).then(|| format!("{key}: {} -> {}", shown(a), shown(b)))
        })
        .collect()
}

/// Reads `path` again and gives it to the limiter; a bad file, or one that sets nothing (see
/// [`load`]), keeps the running config. A reload that leaves every tier off is logged as a
/// warning, as at startup.
fn reload(limiter: &RateLimiter, path: &std::path::Path) {
    let new = match load(path) {
        Ok(new) => new,
        Err(error) => {
            tracing::error!(%error, "config not reloaded: the running config stays");
            return;
        }
    };
    let changed = changes(&limiter.config(), &new);
    let all_off = crate::every_tier_off(&new);
    match limiter.reconfigure(new) {
        Ok(()) if all_off => tracing::warn!(
            changed = %changed.join("; "),
            "config reloaded, and every tier is off (user, endpoint and global limits are 0, \
             and no route or plan sets one): every request is let through"
        ),
        Ok(()) if changed.is_empty() => tracing::info!("config reloaded: nothing changed"),
        Ok(()) => tracing::info!(changed = %changed.join("; "), "config reloaded"),
        Err(error) => tracing::error!(
            field = error.field(),
            %error,
            "config not reloaded: the running config stays"
        ),
    }
}

/// Reloads the config file on every SIGHUP (installed before the server says it listens).
#[cfg(unix)]
pub(crate) fn reload_on_sighup(limiter: RateLimiter, path: std::path::PathBuf) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup()).expect("install SIGHUP handler");
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            reload(&limiter, &path);
        }
    });
}
