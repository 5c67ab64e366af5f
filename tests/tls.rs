//! TLS to Redis (`rediss://`), against `redis-server --tls-port` processes this test starts,
//! with certificates it makes (rcgen): the right CA connects, a wrong one is a configuration
//! error, mutual TLS needs the client certificate, and a TLS URL never falls back to plaintext.
#![cfg(feature = "tls")]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{limits, RedisServer};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tiered_ratelimit::{
    Backend, ConfigError, ConnectError, RateLimitConfig, RateLimitConfigBuilder, RateLimiter,
};

const MINUTE: Duration = Duration::from_secs(60);

/// Certificates for one test, in a directory of its own (removed when dropped).
struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// A CA, a server certificate for 127.0.0.1 and localhost, a client certificate (all
    /// signed by the CA), and an unrelated second CA.
    fn new() -> Self {
        let dir = common::temp_dir("tls");
        let pki = Self { dir };
        let ca = pki.ca("ca");
        pki.ca("other-ca");
        pki.leaf(
            "server",
            &ca,
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        pki.leaf(
            "client",
            &ca,
            vec!["client.test".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        pki
    }

    fn ca(&self, name: &str) -> Issuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("tiered-ratelimit test {name}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(self.path(&format!("{name}.pem")), cert.pem()).unwrap();
        Issuer::new(params, key)
    }

    fn leaf(
        &self,
        name: &str,
        ca: &Issuer<'static, KeyPair>,
        names: Vec<String>,
        usage: ExtendedKeyUsagePurpose,
    ) {
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, ca).unwrap();
        std::fs::write(self.path(&format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(self.path(&format!("{name}-key.pem")), key.serialize_pem()).unwrap();
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn arg(&self, file: &str) -> String {
        self.path(file).to_str().unwrap().to_owned()
    }

    /// A TLS-only server; `auth_clients`: `no` or `yes` (client certificates required).
    fn server(&self, auth_clients: &str) -> RedisServer {
        let (cert, key, ca) = (
            self.arg("server.pem"),
            self.arg("server-key.pem"),
            self.arg("ca.pem"),
        );
        let (client, client_key) = (self.arg("client.pem"), self.arg("client-key.pem"));
        RedisServer::start_tls(
            &[
                "--tls-cert-file",
                &cert,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-auth-clients",
                auth_clients,
            ],
            &["--cacert", &ca, "--cert", &client, "--key", &client_key],
        )
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tls_url(server: &RedisServer) -> String {
    format!("rediss://127.0.0.1:{}", server.port())
}

fn config(builder: RateLimitConfigBuilder) -> RateLimitConfig {
    builder
        .redis_connect_timeout(Duration::from_secs(5))
        .redis_command_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// Connects strictly, checks once, and asserts the check was recorded in Redis.
async fn assert_connects(server: &RedisServer, config: RateLimitConfig) {
    let limiter = RateLimiter::try_connect(config).await.unwrap();
    assert_eq!(limiter.backend(), Backend::Redis);
    assert!(limiter.check("alice", "/items").await.allowed());
    assert_eq!(limiter.backend(), Backend::Redis);
    assert_eq!(
        server.cli(&["ZCARD", "rate_limit:user:alice"]).trim(),
        "1",
        "the check was recorded in Redis, over TLS"
    );
}

/// The default start falls back (and answers); the strict one returns the error.
async fn assert_tls_config_error(config: RateLimitConfig, want: fn(&ConnectError) -> bool) {
    let limiter = RateLimiter::connect(config.clone()).await;
    assert_eq!(limiter.backend(), Backend::Memory);
    assert!(limiter.check("alice", "/items").await.allowed());
    let cause = limiter.fallback_cause().expect("a fallback has a cause");
    assert!(cause.is_config(), "{cause:?}");
    assert_eq!(cause.reason(), "config");
    assert!(want(&cause), "{cause:?}");
    let error = RateLimiter::try_connect(config).await.unwrap_err();
    assert!(want(&error), "{error:?}");
    assert!(error.is_config(), "{error:?}");
}

fn is_tls(e: &ConnectError) -> bool {
    matches!(e, ConnectError::Tls { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_ca_connects_and_the_keys_land_in_redis() {
    let pki = Pki::new();
    let server = pki.server("no");
    let config = config(
        limits(5, 0, 0, MINUTE)
            .redis_url(tls_url(&server))
            .redis_tls_ca_file(pki.path("ca.pem")),
    );
    assert_connects(&server, config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostname_in_the_certificate_connects_too() {
    let pki = Pki::new();
    let server = pki.server("no");
    let config = config(
        limits(5, 0, 0, MINUTE)
            .redis_url(format!("rediss://localhost:{}", server.port()))
            .redis_tls_ca_file(pki.path("ca.pem")),
    );
    assert_connects(&server, config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_a_tls_configuration_error() {
    let pki = Pki::new();
    let server = pki.server("no");
    let config = config(
        limits(5, 0, 0, MINUTE)
            .redis_url(tls_url(&server))
            .redis_tls_ca_file(pki.path("other-ca.pem")),
    );
    assert_tls_config_error(config, is_tls).await;
    assert_eq!(server.cli(&["DBSIZE"]).trim(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_roots_do_not_trust_a_private_ca() {
    let pki = Pki::new();
    let server = pki.server("no");
    let config = config(limits(5, 0, 0, MINUTE).redis_url(tls_url(&server)));
    assert_tls_config_error(config, is_tls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_connects_with_the_client_certificate() {
    let pki = Pki::new();
    let server = pki.server("yes");
    let config = config(
        limits(5, 0, 0, MINUTE)
            .redis_url(tls_url(&server))
            .redis_tls_ca_file(pki.path("ca.pem"))
            .redis_tls_client_cert(pki.path("client.pem"), pki.path("client-key.pem")),
    );
    assert_connects(&server, config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_without_the_client_certificate_fails() {
    let pki = Pki::new();
    let server = pki.server("yes");
    let config = config(
        limits(5, 0, 0, MINUTE)
            .redis_url(tls_url(&server))
            .redis_tls_ca_file(pki.path("ca.pem")),
    );
    assert_tls_config_error(config, is_tls).await;
    assert_eq!(server.cli(&["DBSIZE"]).trim(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_tls_files_are_configuration_errors_naming_the_file() {
    let pki = Pki::new();
    let server = pki.server("yes");
    let missing = pki.path("no-such-ca.pem");
    let config_missing = config(
        limits(5, 0, 0, MINUTE)
            .redis_url(tls_url(&server))
            .redis_tls_ca_file(&missing),
    );
    let error = RateLimiter::try_connect(config_missing).await.unwrap_err();
    match &error {
        ConnectError::TlsFile { path, .. } => assert_eq!(path, &missing),
        other => panic!("{other:?}"),
    }
    assert!(error.to_string().contains("no-such-ca.pem"), "{error}");
    // A key file that holds a certificate instead.
    let wrong_key = config(
        limits(5, 0, 0, MINUTE)
            .redis_url(tls_url(&server))
            .redis_tls_ca_file(pki.path("ca.pem"))
            .redis_tls_client_cert(pki.path("client.pem"), pki.path("client.pem")),
    );
    assert_tls_config_error(wrong_key, |e| matches!(e, ConnectError::TlsFile { .. })).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_url_against_a_plaintext_port_never_sends_a_command() {
    let pki = Pki::new();
    let server = RedisServer::start();
    server.cli(&["CONFIG", "SET", "requirepass", "secret"]);
    let config = limits(5, 0, 0, MINUTE)
        .redis_url(format!("rediss://:secret@127.0.0.1:{}", server.port()))
        .redis_tls_ca_file(pki.path("ca.pem"))
        .redis_connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    // Plain Redis reads the ClientHello as an inline command: it answers an error when the
    // hello happens to hold a newline (rustls then fails on the reply), else waits for one.
    let tls_or_timeout =
        |e: &ConnectError| matches!(e, ConnectError::Tls { .. } | ConnectError::Timeout { .. });
    let error = RateLimiter::try_connect(config.clone()).await.unwrap_err();
    assert!(tls_or_timeout(&error), "{error:?}");
    // Either way the fix names this cause (a timeout cannot be told from a slow server).
    assert!(error.fix().contains("speaks TLS"), "{error}");
    let limiter = RateLimiter::connect(config).await;
    assert_eq!(limiter.backend(), Backend::Memory);
    assert!(limiter.check("alice", "/items").await.allowed());
    let cause = limiter.fallback_cause().unwrap();
    assert!(tls_or_timeout(&cause), "{cause:?}");
    let stats = server.cli(&["-a", "secret", "--no-auth-warning", "INFO", "commandstats"]);
    // One AUTH: redis-cli's own, just now.
    assert!(
        stats.contains("cmdstat_auth:calls=1,"),
        "no password sent: {stats}"
    );
    assert!(
        !stats.contains("cmdstat_script"),
        "no command sent: {stats}"
    );
}

/// docs/REDIS.md, "TLS": "A TLS setting with a plaintext URL is a `ConfigError`
/// (`TlsFileWithoutTls`, naming the setting) ... So is a certificate without its key, or the
/// reverse (`IncompleteClientCert`)." Every TLS scheme takes the files.
#[test]
fn tls_settings_need_a_tls_url_and_a_client_cert_needs_its_key() {
    let e = RateLimitConfig::builder()
        .redis_url("redis://127.0.0.1:6379")
        .redis_tls_ca_file("/etc/ca.pem")
        .build()
        .unwrap_err();
    assert_eq!(e, ConfigError::TlsFileWithoutTls("redis.tls_ca_file"));
    assert_eq!(e.field(), "redis.tls_ca_file");
    assert!(e.to_string().contains("rediss://"), "{e}");
    let e = RateLimitConfig::builder()
        .redis_url("redis+unix:///tmp/redis.sock")
        .redis_tls_client_cert("/c.pem", "/k.pem")
        .build()
        .unwrap_err();
    assert!(matches!(e, ConfigError::TlsFileWithoutTls(_)), "{e:?}");
    for url in [
        "rediss://h:6380",
        "valkeys://h:6380",
        "rediss-cluster://h:7000",
        "rediss-sentinel://h:26379?sentinelServiceName=m",
    ] {
        let ok = RateLimitConfig::builder()
            .redis_url(url)
            .redis_tls_ca_file("/ca.pem")
            .redis_tls_client_cert("/c.pem", "/k.pem")
            .build();
        assert!(ok.is_ok(), "{url}: {ok:?}");
    }

    // From a file: JSON, then TOML, each naming the missing half or the setting.
    let mut config = tiered_ratelimit::RedisConfig {
        url: "rediss://127.0.0.1:6379".into(),
        ..RateLimitConfig::builder()
            .redis_url("redis://127.0.0.1:6379")
            .build()
            .unwrap()
            .redis()
            .unwrap()
            .clone()
    };
    config.tls_cert_file = Some(Path::new("/c.pem").into());
    let text = serde_json::json!({ "window": "60s", "redis": config }).to_string();
    let e = serde_json::from_str::<RateLimitConfig>(&text).unwrap_err();
    assert!(e.to_string().contains("redis.tls_key_file"), "{e}");
    for (redis, named) in [
        (
            "url = \"rediss://h\"\ntls_key_file = \"/k.pem\"",
            "redis.tls_cert_file",
        ),
        (
            "url = \"redis://h\"\ntls_ca_file = \"/ca.pem\"",
            "redis.tls_ca_file",
        ),
    ] {
        let e = toml::from_str::<RateLimitConfig>(&format!("[redis]\n{redis}\n")).unwrap_err();
        assert!(e.to_string().contains(named), "{redis}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_url_against_a_tls_port_does_not_connect() {
    let pki = Pki::new();
    let server = pki.server("no");
    let config = limits(5, 0, 0, MINUTE)
        .redis_url(format!("redis://127.0.0.1:{}", server.port()))
        .redis_connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let error = RateLimiter::try_connect(config).await.unwrap_err();
    assert!(
        matches!(
            error,
            ConnectError::Unreachable { .. } | ConnectError::Timeout { .. }
        ),
        "{error:?}"
    );
}
