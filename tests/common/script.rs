//! What the tests that drive the Redis script directly share: a fred client of a test's own
//! server, and a check's reply as strings.

use fred::prelude::{Builder, Client, ClientLike, Config};
use fred::types::Value;

use super::RedisServer;

/// A connected client of `server`.
pub async fn client(server: &RedisServer) -> Client {
    let config = Config::from_url(&server.url()).unwrap();
    let client = Builder::from_config(config).build().unwrap();
    client.init().await.unwrap();
    client
}

/// A check's reply as strings: the script may give an oldest entry's time as its member's
/// digits or as an integer, the same number.
pub fn strings(reply: &Value) -> Vec<String> {
    let Value::Array(values) = reply else {
        panic!("a check's reply is not a list: {reply:?}")
    };
    values
        .iter()
        .map(|v| match v {
            Value::Integer(i) => i.to_string(),
            Value::String(s) => s.to_string(),
            Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other:?}"),
        })
        .collect()
}

/// Whether a check's reply (as `strings` gives it) says the check was recorded: `1`, or `4`
/// for a recording with no tier full (its facts in pairs; src/store/redis/script.lua).
pub fn recorded(reply: &[String]) -> bool {
    matches!(reply.first().map(String::as_str), Some("1" | "4"))
}

/// A key's members and scores, oldest first, from what redis-cli prints for
/// `ZRANGE key 0 -1 WITHSCORES`.
pub fn scored_members(out: &str) -> Vec<(String, u64)> {
    let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    lines
        .chunks(2)
        .map(|p| (p[0].to_owned(), p[1].trim().parse().unwrap()))
        .collect()
}
