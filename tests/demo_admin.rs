//! The demo's admin routes over real HTTP (issue 13, item 5): they exist only with
//! `--admin-token`, refuse any request without the exact token, and a block set through one
//! instance's routes holds on another instance on the same Redis at its next request.
#![cfg(all(feature = "redis", feature = "axum", feature = "admin"))]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::demo::{server_command, Demo};
use common::RedisServer;
use reqwest::{Client, StatusCode};
use serde_json::Value;

const TOKEN: &str = "a-demo-token-of-32-characters-xx";

async fn admin(client: &Client, demo: &Demo, path: &str, body: &str, token: &str) -> StatusCode {
    client
        .post(demo.url(&format!("/admin{path}")))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
        .status()
}

/// `GET /api/v1/items` as `user`: the status and the body.
async fn items(client: &Client, demo: &Demo, user: &str) -> (StatusCode, String) {
    let resp = client
        .get(demo.url("/api/v1/items"))
        .header("x-user-id", user)
        .send()
        .await
        .unwrap();
    (resp.status(), resp.text().await.unwrap())
}

#[tokio::test]
async fn without_the_flag_the_admin_routes_do_not_exist() {
    let demo = Demo::start(&["--user-limit", "5"]);
    let client = Client::new();
    for path in ["/admin/usage?user=a", "/admin/block"] {
        let resp = client.get(demo.url(path)).bearer_auth(TOKEN).send().await;
        assert_eq!(resp.unwrap().status(), 404, "{path}");
    }
    let status = admin(
        &client,
        &demo,
        "/block",
        r#"{"user":"a","seconds":5}"#,
        TOKEN,
    )
    .await;
    assert_eq!(status, 404);
}

/// README: `--admin-token` takes "16 characters or more": 15 (of them one outside ASCII,
/// which counts as one) is refused.
#[test]
fn a_short_token_is_refused_at_start() {
    for token in ["short", "0123456789abcd\u{e9}"] {
        let mut child = server_command()
            .args(["--listen", "127.0.0.1:0", "--admin-token", token])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A token taken would start a server that never exits: fail, not hang.
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{token:?} was taken: the demo started");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        assert_eq!(status.code(), Some(2), "{token:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--admin-token must be at least 16"),
            "{token:?}: {stderr}"
        );
    }
}

/// HTTP strips whitespace at the ends of a header's value, so a token with a trailing space
/// could never be presented: every admin request would be a 401, with no word at start (an
/// outside audit).
#[test]
fn a_token_no_request_can_present_is_refused_at_start() {
    for token in [
        "0123456789abcdef ",
        "0123456789abcdef\t",
        "0123456789\u{7}abcdef",
    ] {
        let out = server_command()
            .args(["--listen", "127.0.0.1:0", "--admin-token", token])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{token:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("whitespace"), "{token:?}: {stderr}");
    }
    // A tab inside, a space first (it follows `Bearer `), or any byte above 0x7f goes in a
    // header: such a token is taken.
    let mut demo = server_command()
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin-token",
            " 0123456789\tabcdef\u{a0}",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(demo.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _ = demo.kill();
    let _ = demo.wait();
    assert!(line.starts_with("listening on"), "{line}");
}

#[tokio::test]
async fn only_the_exact_token_opens_the_routes() {
    let demo = Demo::start(&["--user-limit", "5", "--admin-token", TOKEN]);
    let client = Client::new();
    let usage = demo.url("/admin/usage?user=alice&endpoint=/api/v1/items");
    let shorter = &TOKEN[..TOKEN.len() - 1];
    let longer = format!("{TOKEN}x");
    for auth in [None, Some(shorter), Some(longer.as_str()), Some("x")] {
        let mut req = client.get(&usage);
        if let Some(token) = auth {
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 401, "{auth:?}");
        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
    }
    let resp = client.get(&usage).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(body["tiers"][0]["limit"], 5, "{body}");

    let block = r#"{"user":"mallory","seconds":600}"#;
    assert_eq!(admin(&client, &demo, "/block", block, shorter).await, 401);
    assert_eq!(
        items(&client, &demo, "mallory").await.0,
        200,
        "not blocked by a wrong token"
    );
    assert_eq!(admin(&client, &demo, "/block", block, TOKEN).await, 200);
    let (status, body) = items(&client, &demo, "mallory").await;
    assert_eq!(status, 429);
    assert!(body.contains("\"block\":true"), "{body}");
    let unblock = r#"{"user":"mallory"}"#;
    assert_eq!(admin(&client, &demo, "/unblock", unblock, TOKEN).await, 200);
    assert_eq!(items(&client, &demo, "mallory").await.0, 200);
}

#[tokio::test]
async fn a_block_through_one_instance_holds_on_another() {
    let server = RedisServer::start();
    let url = server.url();
    let args = [
        "--user-limit",
        "50",
        "--redis",
        &url,
        // Long enough that no hiccup of a loaded machine falls an instance back to memory.
        "--redis-timeout",
        "2s",
        "--admin-token",
        TOKEN,
    ];
    let (a, b) = (Demo::start(&args), Demo::start(&args));
    let client = Client::new();
    assert_eq!(items(&client, &b, "eve").await.0, 200);
    let block = r#"{"user":"eve","seconds":600}"#;
    assert_eq!(admin(&client, &a, "/block", block, TOKEN).await, 200);
    // b's very next request for eve meets the block: b asks Redis, which holds it.
    let (status, body) = items(&client, &b, "eve").await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("\"block\":true"), "{body}");
    assert_eq!(items(&client, &b, "frank").await.0, 200);
    let unblock = r#"{"user":"eve"}"#;
    assert_eq!(admin(&client, &b, "/unblock", unblock, TOKEN).await, 200);
    assert_eq!(items(&client, &a, "eve").await.0, 200);
}

/// The shell words of one command line: `'...'` and `"..."` quoting, `$TOKEN` substituted.
fn shell_words(line: &str, token: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => words.extend(word.take()),
            '#' if word.is_none() => break,
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                w.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                let quoted: String = chars.by_ref().take_while(|&c| c != '"').collect();
                let w = word.get_or_insert_with(String::new);
                w.push_str(&quoted.replace("$TOKEN", token));
            }
            '$' => {
                let rest: String = chars
                    .by_ref()
                    .take_while(|c| c.is_ascii_uppercase())
                    .collect();
                assert_eq!(rest, "TOKEN", "only $TOKEN is known: {line}");
                word.get_or_insert_with(String::new).push_str(token);
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// Every `curl` to the admin routes that the README and docs/ show, sent as written (its
/// method, headers and body) to a demo started as they say: each is answered 200. An outside
/// review copied the README's block command, which lacked `Content-Type: application/json`,
/// and got a 415.
#[tokio::test]
async fn the_admin_curls_in_the_docs_work_as_written() {
    let demo = Demo::start(&["--user-limit", "5", "--admin-token", TOKEN]);
    let client = Client::new();
    let root = env!("CARGO_MANIFEST_DIR");
    let mut docs = vec![format!("{root}/README.md")];
    for entry in std::fs::read_dir(format!("{root}/docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path.display().to_string());
        }
    }
    let mut sent = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap().replace("\\\n", " ");
        for line in text
            .lines()
            .filter(|l| l.starts_with("curl ") && l.contains("/admin/"))
        {
            let words = shell_words(line, TOKEN);
            let (mut method, mut body) = (reqwest::Method::GET, None);
            let (mut headers, mut url) = (Vec::new(), None);
            let mut it = words.iter().skip(1);
            while let Some(w) = it.next() {
                match w.as_str() {
                    "-s" | "-i" | "-si" => {}
                    "-X" => method = it.next().unwrap().parse().unwrap(),
                    "-H" => headers.push(it.next().unwrap().clone()),
                    "-d" => {
                        body = it.next().cloned();
                        if method == reqwest::Method::GET {
                            method = reqwest::Method::POST; // curl -d implies POST
                        }
                    }
                    w if w.starts_with("localhost:3000/") => url = Some(w.to_owned()),
                    other => panic!("{doc}: a curl flag this test does not know: {other}: {line}"),
                }
            }
            let path = url
                .expect(line)
                .trim_start_matches("localhost:3000")
                .to_owned();
            let mut req = client.request(method, demo.url(&path));
            // curl -d sends this unless told otherwise: the case the review met.
            if body.is_some()
                && !headers
                    .iter()
                    .any(|h| h.to_ascii_lowercase().starts_with("content-type:"))
            {
                req = req.header("content-type", "application/x-www-form-urlencoded");
            }
            for h in &headers {
                let (k, v) = h.split_once(':').expect(h);
                req = req.header(k.trim(), v.trim());
            }
            if let Some(body) = body {
                req = req.body(body);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 200, "{doc}: {line}");
            sent += 1;
        }
    }
    assert!(sent >= 3, "the docs show the admin curls: found {sent}");
}
