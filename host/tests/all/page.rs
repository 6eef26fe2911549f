//! The operators' page in a real browser: Debian's Chromium, driven
//! headless through ChromeDriver's WebDriver protocol, as an operator and
//! a viewer would use it against a real `keel serve`.
//!
//! `KEEL_SCREENSHOTS=DIR` keeps the inbox and timeline screenshots there,
//! relative to `host/` (`KEEL_SCREENSHOTS=$PWD/docs/img` from the top
//! updates the committed ones).

use crate::common;

use common::http::{request, tokens_file, wait_for, Reply, ServeProcess};
use common::wasm::quickstart_config;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const OPERATOR: &str = "page-operator-token";
const VIEWER: &str = "page-viewer-token";
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// ChromeDriver and one browser session, both ended on drop.
struct Browser {
    driver: std::process::Child,
    addr: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = request(
            self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
            &[],
            None,
        );
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn tool(name: &str) -> Option<PathBuf> {
    let p = PathBuf::from("/usr/bin").join(name);
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{} is missing: `scripts/setup.sh --test` installs Debian's chromium and chromium-driver",
        p.display()
    );
    eprintln!(
        "skipping: {} is not installed (scripts/setup.sh --test)",
        p.display()
    );
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Browser {
    fn start() -> Option<Browser> {
        let chromium = tool("chromium")?;
        let driver_bin = tool("chromedriver")?;
        let port = free_port();
        let driver = std::process::Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let since = Instant::now();
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                since.elapsed() < Duration::from_secs(20),
                "chromedriver did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--window-size=1100,850",
                    format!("--user-data-dir={}", profile.path().display()),
                ]
            }
        }}});
        let r = wd(addr, "POST", "/session", Some(caps));
        let session = r["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {r}"))
            .to_string();
        Some(Browser {
            driver,
            addr,
            session,
            _profile: profile,
        })
    }

    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        wd(
            self.addr,
            method,
            &format!("/session/{}{path}", self.session),
            body,
        )
    }

    fn go(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    fn find_all(&self, css: &str) -> Vec<String> {
        let v = self.cmd(
            "POST",
            "/elements",
            Some(json!({ "using": "css selector", "value": css })),
        );
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first element matching `css`, waiting for it (20 s at most).
    fn find(&self, css: &str) -> String {
        self.wait(&format!("an element {css}"), || {
            self.find_all(css).into_iter().next()
        })
    }

    fn text(&self, el: &str) -> String {
        self.cmd("GET", &format!("/element/{el}/text"), None)
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    fn click(&self, el: &str) {
        self.cmd("POST", &format!("/element/{el}/click"), Some(json!({})));
    }

    fn type_into(&self, el: &str, text: &str) {
        self.cmd("POST", &format!("/element/{el}/clear"), Some(json!({})));
        self.cmd(
            "POST",
            &format!("/element/{el}/value"),
            Some(json!({ "text": text })),
        );
    }

    fn script(&self, code: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({ "script": code, "args": [] })),
        )
    }

    fn wait<T>(&self, what: &str, f: impl FnMut() -> Option<T>) -> T {
        wait_for(what, f)
    }

    /// A PNG of the window; kept in `KEEL_SCREENSHOTS` when set.
    fn screenshot(&self, name: &str) -> Vec<u8> {
        let b64 = self.cmd("GET", "/screenshot", None);
        let png = base64(b64.as_str().unwrap());
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        if let Ok(dir) = std::env::var("KEEL_SCREENSHOTS") {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(Path::new(&dir).join(name), &png).unwrap();
        }
        png
    }
}

/// One WebDriver command; its `value`, or a panic with the driver's error.
fn wd(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> Value {
    let text = body.map(|b| b.to_string());
    let r: Reply = request(
        addr,
        method,
        path,
        None,
        &[],
        text.as_deref().map(str::as_bytes),
    );
    let v: Value =
        serde_json::from_str(&r.body).unwrap_or_else(|_| panic!("{method} {path}: {}", r.body));
    assert_eq!(r.status, 200, "{method} {path}: {v}");
    v["value"].clone()
}

fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = s
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= u32::from(val(*c)) << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

#[test]
fn an_operator_starts_approves_and_watches_a_run_in_the_browser_and_a_viewer_cannot_act() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens_file(
        dir.path(),
        &[("alice", "operator", OPERATOR), ("bob", "viewer", VIEWER)],
    );
    let Some(cfg) = quickstart_config(
        dir.path(),
        &format!("[serve]\ntokens_file = \"{tokens}\"\n"),
    ) else {
        return;
    };
    let store = dir.path().join("keel.db");
    let srv = ServeProcess::start(store.to_str().unwrap(), &["-c", cfg.to_str().unwrap()]);
    let Some(b) = Browser::start() else {
        return;
    };
    let base = format!("http://{}", srv.addr);

    // The token is entered once.
    b.go(&format!("{base}/"));
    let input = b.find("#token");
    b.type_into(&input, OPERATOR);
    b.click(&b.find("#token-form button"));
    b.wait("the operator's name", || {
        b.text(&b.find("#whoami"))
            .contains("alice (operator)")
            .then_some(())
    });

    // Start the quickstart run from the form.
    b.click(&b.find("#nav-start"));
    b.type_into(&b.find("#start-goal"), "write hello.txt and read it back");
    b.click(&b.find("#start-form button"));
    let run_id = b.wait("the run's page", || {
        let t = b.text(&b.find("#run-id"));
        t.starts_with("run_").then_some(t)
    });

    // Its approval appears in the inbox without a reload.
    b.click(&b.find("#nav-inbox"));
    let card = b.find("#inbox li");
    let text = b.text(&card);
    assert!(text.contains(&run_id), "{text}");
    assert!(
        text.contains("fs_write") && text.contains("writes need an operator"),
        "{text}"
    );
    let args = b.text(&b.find("#inbox li .arguments"));
    assert!(args.contains("\"path\": \"hello.txt\""), "{args}");
    assert!(b.text(&b.find("#inbox li .expires")).contains("no expiry"));
    b.screenshot("inbox.png");

    // Approve with a note; the timeline reaches `completed` live.
    b.type_into(&b.find("#inbox li .note"), "hello.txt is fine");
    b.click(&b.find("#inbox li button.approve"));
    b.wait("the inbox to empty", || {
        b.find_all("#inbox li").is_empty().then_some(())
    });
    b.go(&format!("{base}/#/runs/{run_id}"));
    b.wait("the run to complete", || {
        b.text(&b.find("#run-status"))
            .starts_with("completed")
            .then_some(())
    });
    b.wait("three steps", || {
        (b.find_all("#timeline li").len() == 3).then_some(())
    });
    let timeline = b.text(&b.find("#timeline"));
    assert!(
        timeline.contains("fs_write") && timeline.contains("fs_read"),
        "{timeline}"
    );
    assert!(
        timeline.contains("approved by alice: hello.txt is fine"),
        "{timeline}"
    );
    b.screenshot("timeline.png");
    let detail = srv
        .get(&format!("/api/runs/{run_id}"), Some(OPERATOR))
        .json();
    assert_eq!(detail["approvals"][0]["decided_by"], "alice");
    assert_eq!(detail["approvals"][0]["note"], "hello.txt is fine");

    // A viewer sees the next run's approval but no button, and is refused.
    let r = srv.post("/api/runs", Some(OPERATOR), r#"{"goal":"another"}"#);
    assert_eq!(r.status, 201);
    b.go(&format!("{base}/#/inbox"));
    b.type_into(&b.find("#token"), VIEWER);
    b.click(&b.find("#token-form button"));
    b.wait("the viewer's name", || {
        b.text(&b.find("#whoami"))
            .contains("bob (viewer)")
            .then_some(())
    });
    let card = b.find("#inbox li");
    assert!(b.text(&card).contains("Viewers cannot answer approvals"));
    assert!(b.find_all("#inbox li button.approve").is_empty());
    let id = b.script("return document.querySelector('#inbox li').dataset.id");
    let status = b.script(&format!(
        "return fetch('/api/approvals/{}/approve', {{method: 'POST', headers: {{'Authorization': 'Bearer ' + sessionStorage.getItem('keel-token'), 'Content-Type': 'application/json'}}, body: '{{}}'}}).then(r => r.status)",
        id.as_str().unwrap()
    ));
    assert_eq!(status, 403);

    // At phone width nothing scrolls sideways.
    b.cmd(
        "POST",
        "/window/rect",
        Some(json!({ "width": 390, "height": 844 })),
    );
    let wide = b.script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
    );
    assert!(
        wide.as_i64().unwrap() <= 0,
        "the page scrolls sideways by {wide} px at phone width"
    );
    b.screenshot("inbox-phone.png");
    drop(b);
    srv.terminate();
}
