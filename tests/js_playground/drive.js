// Drive the playground page (GET /) of a running recurd in Debian's chromium through playwright-core,
// and report what the page showed and what the server says, as one JSON object on stdout
// (tests/python/test_playground.py judges it). Usage: node drive.js BASE_URL SCREENSHOT_PATH
// The server is asked directly (fetch from node, not through the page) for the independent side.
"use strict";
const { chromium } = require("playwright-core");

const [base, shot] = process.argv.slice(2);
const STEP_MS = 60000;

async function server(path) {
  const r = await fetch(base + path);
  return { status: r.status, body: r.status === 200 ? await r.json() : null };
}

async function main() {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium", headless: true, timeout: STEP_MS,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const out = { console_errors: [], csp_violations: 0 };
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 820 } });
    page.setDefaultTimeout(STEP_MS);
    page.on("console", (m) => { if (m.type() === "error") out.console_errors.push(m.text()); });
    page.on("pageerror", (e) => out.console_errors.push(String(e)));
    const resp = await page.goto(base + "/");
    out.status = resp.status();
    out.content_type = resp.headers()["content-type"];
    out.csp = resp.headers()["content-security-policy"];
    await page.waitForSelector("body[data-ready='1']");
    out.model_info = await page.textContent("#model-info");

    // 1. a message: count the distinct texts the model bubble showed while the stream ran
    await page.evaluate(() => {
      window.__updates = [];
      const chat = document.getElementById("chat");
      new MutationObserver(() => {
        const m = chat.querySelectorAll(".msg.model");
        const t = m.length ? m[m.length - 1].textContent : "";
        const u = window.__updates;
        if (t && (u.length === 0 || u[u.length - 1] !== t)) u.push(t);
      }).observe(chat, { subtree: true, childList: true, characterData: true });
    });
    const message = "The quick brown fox";
    // long enough that the reply spans several reads (the later messages use 40); and the
    // browser's download throttled to 8 KB/s for this one stream (Chrome DevTools Protocol),
    // so that its ~15 KB arrive over about two seconds however busy the machine is: a browser
    // descheduled while the daemon generates would otherwise read the whole reply at once
    const cdp = await page.context().newCDPSession(page);
    await cdp.send("Network.enable");
    await cdp.send("Network.emulateNetworkConditions",
                   { offline: false, latency: 0, downloadThroughput: 8000, uploadThroughput: -1 });
    await page.fill("#max-tokens", "240");
    await page.fill("#input", message);
    await page.click("#send");
    await page.waitForFunction(() => document.body.dataset.busy === "0" && /generated/.test(document.getElementById("status").textContent),
                               null, { timeout: 60000 });
    await cdp.send("Network.emulateNetworkConditions",
                   { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
    out.message_bytes = Buffer.byteLength(message, "utf8");
    out.first_max_tokens = 240;
    await page.fill("#max-tokens", "40");
    out.updates = await page.evaluate(() => window.__updates);
    out.reply = await page.evaluate(() => { const m = document.querySelectorAll("#chat .msg.model"); return m[m.length - 1].textContent; });
    out.first_session = await page.evaluate(() => window.playground.current);
    out.status_after_send = await page.textContent("#status");
    out.server_after_send = (await server("/v1/sessions/" + out.first_session)).body;

    // 2. a checkpoint, a second message, then roll back to the checkpoint
    await page.click("#checkpoint");
    await page.waitForFunction(() => document.getElementById("checkpoint-select").options.length === 1 && document.body.dataset.busy === "0");
    out.checkpoints = (await server("/v1/sessions/" + out.first_session + "/checkpoints")).body;
    await page.fill("#input", " and then");
    await page.click("#send");
    await page.waitForFunction(() => document.body.dataset.busy === "0" && /generated/.test(document.getElementById("status").textContent));
    out.server_before_rollback = (await server("/v1/sessions/" + out.first_session)).body;
    out.plot = await page.evaluate(() => ({
      state: [...document.querySelectorAll("#plot circle.state-point")].map((c) => [Number(c.dataset.tokens), Number(c.dataset.bytes)]),
      kv: [...document.querySelectorAll("#plot circle.kv-point")].map((c) => [Number(c.dataset.tokens), Number(c.dataset.bytes)]),
      kv_per_token: window.playground.kvPerToken,
      formula: document.querySelector(".formula").textContent,
    }));
    await page.click("#rollback");
    await page.waitForFunction(() => document.body.dataset.busy === "0" && /rolled back/.test(document.getElementById("status").textContent));
    out.server_after_rollback = (await server("/v1/sessions/" + out.first_session)).body;
    out.page_tokens_after_rollback = Number(await page.textContent("#tokens-seen"));

    // 3. fork: the page moves to a new session the server holds, the original stays
    await page.click("#fork");
    await page.waitForFunction(() => document.body.dataset.busy === "0" && /forked/.test(document.getElementById("status").textContent));
    out.fork_session = await page.evaluate(() => window.playground.current);
    out.server_fork = await server("/v1/sessions/" + out.fork_session);
    out.server_original = await server("/v1/sessions/" + out.first_session);
    out.session_options = await page.evaluate(() => document.getElementById("session-select").options.length);
    // a message on the fork moves the fork only
    await page.fill("#input", " Another line");
    await page.click("#send");
    await page.waitForFunction(() => document.body.dataset.busy === "0" && /generated/.test(document.getElementById("status").textContent));
    out.server_fork_after = (await server("/v1/sessions/" + out.fork_session)).body;
    out.server_original_after = (await server("/v1/sessions/" + out.first_session)).body;
    out.errors_shown = await page.evaluate(() => document.getElementById("status").className);
    await page.screenshot({ path: shot, fullPage: true });
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((e) => { console.error(e && e.stack || String(e)); process.exit(1); });
