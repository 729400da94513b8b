//! A real headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`,
//! which `scripts/with-services.sh` installs when missing): one `chromedriver` process per
//! [`Browser`], killed with its browser when the test ends.
//!
//! Every helper waits for a condition on the page (bounded by [`WAIT_LIMIT`]), never for a
//! fixed time, and a step that fails saves a screenshot (and the page's HTML) under
//! `target/tmp/browser-failures/` before the test panics with what it waited for.

use std::{
    net::TcpListener,
    os::unix::process::CommandExt,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use fantoccini::{elements::Element, Client, ClientBuilder, Locator};
use platform::testing::WAIT_LIMIT;
use serde_json::{json, Value};

/// Longest one WebDriver command may take (a page stuck in a script would hold it forever).
const COMMAND_LIMIT: Duration = Duration::from_secs(5);

/// Where failing steps leave their screenshots.
pub fn failure_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("browser-failures")
}

fn program(env: &str, default: &str) -> String {
    let path = std::env::var(env).unwrap_or_else(|_| default.to_owned());
    assert!(
        std::path::Path::new(&path).exists(),
        "{path} is missing: the browser tests need Debian's chromium and chromium-driver \
         (scripts/test.sh installs them), or {env} pointing at them"
    );
    path
}

/// A Chrome DevTools Protocol command through chromedriver's vendor endpoint.
#[derive(Debug)]
struct CdpCommand {
    body: Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for CdpCommand {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!(
            "session/{}/goog/cdp/execute",
            session.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (axum::http::Method, Option<String>) {
        (axum::http::Method::POST, Some(self.body.to_string()))
    }
}

/// A headless Chromium session.
pub struct Browser {
    client: Option<Client>,
    driver: Child,
    test: &'static str,
}

impl Browser {
    /// Starts `chromedriver` and a headless Chromium session at desktop size, in English
    /// unless the page chooses otherwise.
    pub async fn start(test: &'static str) -> Self {
        Self::start_with(test, &[]).await
    }

    /// [`Self::start`] with JavaScript off: what a crawler or a link preview reads.
    pub async fn start_without_script(test: &'static str) -> Self {
        Self::start_with(test, &["--blink-settings=scriptEnabled=false"]).await
    }

    async fn start_with(test: &'static str, extra_args: &[&str]) -> Self {
        let driver_path = program("WEBOOK_TEST_CHROMEDRIVER", "/usr/bin/chromedriver");
        let chromium = program("WEBOOK_TEST_CHROMIUM", "/usr/bin/chromium");
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut driver = Command::new(driver_path);
        driver.arg(format!("--port={port}"));
        // Set to a file path to keep chromedriver's own log of a session.
        if let Ok(log) = std::env::var("WEBOOK_TEST_CHROMEDRIVER_LOG") {
            driver.arg(format!("--log-path={log}")).arg("--verbose");
        }
        let driver = driver
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: dropping the browser kills chromedriver and Chromium.
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        platform::testing::wait_until("chromedriver answers", || async {
            reqwest::get(format!("{url}/status")).await.is_ok()
        })
        .await;
        let mut args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
            "--lang=en-US",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
        ];
        args.extend_from_slice(extra_args);
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({ "binary": chromium, "args": args }),
        );
        let client = ClientBuilder::rustls()
            .expect("TLS roots")
            .capabilities(capabilities)
            .connect(&url)
            .await
            .expect("a Chromium session");
        Self {
            client: Some(client),
            driver,
            test,
        }
    }

    /// The WebDriver client.
    pub fn client(&self) -> &Client {
        self.client.as_ref().expect("session open")
    }

    /// Loads `url`.
    pub async fn open(&self, url: &str) {
        self.note(&format!("open {url}"));
        if let Err(err) = self.client().goto(url).await {
            self.fail(&format!("open {url}"), &err.to_string()).await;
        }
    }

    /// Runs `script` (a function body; `arguments` are `args`) and returns its value.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        match self.client().execute(script, args).await {
            Ok(value) => value,
            Err(err) => self.fail(&format!("run {script}"), &err.to_string()).await,
        }
    }

    /// Runs Chrome DevTools Protocol command `cmd` with `params` (chromedriver's
    /// `goog/cdp/execute`) and returns its result: Chromium's own counters, such as
    /// `Performance.getMetrics`, which WebDriver does not expose.
    pub async fn cdp(&self, cmd: &str, params: Value) -> Value {
        let command = CdpCommand {
            body: json!({ "cmd": cmd, "params": params }),
        };
        match self.client().issue_cmd(command).await {
            Ok(value) => value,
            Err(err) => self.fail(&format!("CDP {cmd}"), &err.to_string()).await,
        }
    }

    /// Waits until `script` returns something truthy; returns it.
    pub async fn wait_js(&self, what: &str, script: &str, args: Vec<Value>) -> Value {
        self.note(&format!("wait for {what}"));
        let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
        let mut last = Value::Null;
        loop {
            let run = self.client().execute(script, args.clone());
            if let Ok(Ok(value)) = tokio::time::timeout(COMMAND_LIMIT, run).await {
                let truthy = match &value {
                    Value::Null => false,
                    Value::Bool(b) => *b,
                    Value::String(s) => !s.is_empty(),
                    Value::Number(n) => n.as_f64() != Some(0.0),
                    _ => true,
                };
                if truthy {
                    return value;
                }
                last = value;
            }
            if tokio::time::Instant::now() > deadline {
                self.fail(what, &format!("last value {last}")).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the console has rendered page `page` (its `data-page`, with `data-ready`).
    pub async fn ready(&self, page: &str) {
        self.wait_js(
            &format!("page {page} rendered"),
            "const d = document.documentElement.dataset; \
             return d.page === arguments[0] && d.ready !== undefined;",
            vec![json!(page)],
        )
        .await;
    }

    /// The first element matching `css` that is shown, waiting for it.
    pub async fn el(&self, css: &str) -> Element {
        let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
        loop {
            if let Ok(found) = self.client().find_all(Locator::Css(css)).await {
                for element in found {
                    if element.is_displayed().await.unwrap_or(false) {
                        return element;
                    }
                }
            }
            if tokio::time::Instant::now() > deadline {
                self.fail(&format!("a visible {css}"), "none appeared")
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Replaces the value of field `css` with `text`.
    pub async fn fill(&self, css: &str, text: &str) {
        self.note(&format!("fill {css}"));
        let field = self.el(css).await;
        let typed = async {
            field.clear().await?;
            field.send_keys(text).await
        };
        if let Err(err) = typed.await {
            self.fail(&format!("type into {css}"), &err.to_string())
                .await;
        }
    }

    /// Clicks the visible element `css` (found again if the page re-rendered it meanwhile).
    pub async fn click(&self, css: &str) {
        self.note(&format!("click {css}"));
        let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
        loop {
            let element = self.el(css).await;
            let clicked = tokio::time::timeout(COMMAND_LIMIT, element.click()).await;
            match clicked {
                Ok(Ok(())) => return,
                Ok(Err(err)) if tokio::time::Instant::now() > deadline => {
                    self.fail(&format!("click {css}"), &err.to_string()).await
                }
                Err(_) => self.fail(&format!("click {css}"), "no answer").await,
                Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Waits until the text of some element matching `css` contains `needle`.
    pub async fn wait_text(&self, css: &str, needle: &str) {
        self.wait_js(
            &format!("{css} showing {needle:?}"),
            "return [...document.querySelectorAll(arguments[0])] \
               .some(e => e.innerText.includes(arguments[1]));",
            vec![json!(css), json!(needle)],
        )
        .await;
    }

    /// Waits until attribute `attr` of the first element matching `css` equals `value`.
    pub async fn wait_attr(&self, css: &str, attr: &str, value: &str) {
        self.wait_js(
            &format!("{css} with {attr}={value:?}"),
            "const e = document.querySelector(arguments[0]); \
             return e !== null && e.getAttribute(arguments[1]) === arguments[2];",
            vec![json!(css), json!(attr), json!(value)],
        )
        .await;
    }

    /// Accepts the `confirm()` dialog the page opened.
    pub async fn accept_dialog(&self) {
        let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
        while let Err(err) = self.client().accept_alert().await {
            if tokio::time::Instant::now() > deadline {
                self.fail("a dialog to accept", &err.to_string()).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the page recorded as going wrong: Content-Security-Policy violations and
    /// uncaught errors (the console's `window.consoleProblems`).
    pub async fn problems(&self) -> Vec<String> {
        let value = self
            .js("return window.consoleProblems || [];", vec![])
            .await;
        serde_json::from_value(value).unwrap_or_default()
    }

    /// Logs a step (shown with the output of a failing test).
    fn note(&self, step: &str) {
        eprintln!(
            "[{} {}] {step}",
            self.test,
            chrono::Utc::now().format("%H:%M:%S%.3f")
        );
    }

    /// Saves a screenshot and the page, then panics with what was awaited.
    pub async fn fail(&self, what: &str, detail: &str) -> ! {
        let dir = failure_dir();
        std::fs::create_dir_all(&dir).ok();
        let stem = format!("{}-{}", self.test, chrono::Utc::now().format("%H%M%S%.3f"));
        let mut saved = Vec::new();
        if let Ok(Ok(png)) = tokio::time::timeout(COMMAND_LIMIT, self.client().screenshot()).await {
            let path = dir.join(format!("{stem}.png"));
            if std::fs::write(&path, png).is_ok() {
                saved.push(path.display().to_string());
            }
        }
        if let Ok(Ok(html)) = tokio::time::timeout(COMMAND_LIMIT, self.client().source()).await {
            let path = dir.join(format!("{stem}.html"));
            if std::fs::write(&path, html).is_ok() {
                saved.push(path.display().to_string());
            }
        }
        let url = match tokio::time::timeout(COMMAND_LIMIT, self.client().current_url()).await {
            Ok(Ok(url)) => url.to_string(),
            _ => "(the browser does not answer)".to_owned(),
        };
        panic!(
            "browser step failed: {what}: {detail}\n  at {url}\n  saved: {}",
            saved.join(", ")
        );
    }

    /// Ends the session.
    pub async fn close(mut self) {
        if let Some(client) = self.client.take() {
            client.close().await.ok();
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group: chromedriver and the Chromium it started.
        let group = format!("-{}", self.driver.id());
        Command::new("kill")
            .args(["-s", "KILL", "--", &group])
            .status()
            .ok();
        self.driver.kill().ok();
        self.driver.wait().ok();
    }
}
