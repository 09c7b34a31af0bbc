// Runbell web app: small progressive enhancements on server-rendered pages.
// Everything here is optional: reading and answering work without JavaScript.
// Rules: never steal focus, never touch what the person is typing, never submit or
// reload on its own.
"use strict";

(function () {
  const body = document.body;
  const page = body.dataset.page;

  function csrfToken() {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  }

  // --- countdowns ---------------------------------------------------------------------

  function relative(target, now) {
    let seconds = Math.round((target - now) / 1000);
    const future = seconds >= 0;
    seconds = Math.abs(seconds);
    let amount;
    if (seconds < 60) amount = "less than a minute";
    else if (seconds < 3600) amount = plural(Math.floor(seconds / 60), "minute");
    else if (seconds < 86400) amount = plural(Math.floor(seconds / 3600), "hour");
    else amount = plural(Math.floor(seconds / 86400), "day");
    return future ? "in " + amount : "expired " + amount + " ago";
  }

  function plural(n, word) {
    return n + " " + word + (n === 1 ? "" : "s");
  }

  function tickCountdowns() {
    const now = Date.now();
    document.querySelectorAll("[data-countdown]").forEach(function (el) {
      const target = Date.parse(el.dataset.countdown);
      if (isNaN(target)) return;
      const text = relative(target, now);
      if (el.textContent !== text) el.textContent = text;
    });
  }

  if (document.querySelector("[data-countdown]")) {
    tickCountdowns();
    window.setInterval(tickCountdowns, 15000);
  }

  // --- live feed ----------------------------------------------------------------------

  function openStream(handlers) {
    if (!("EventSource" in window)) return null;
    const cursor = body.dataset.cursor;
    const url = "/v1/events/stream" + (cursor ? "?after=" + encodeURIComponent(cursor) : "");
    const source = new EventSource(url);
    source.addEventListener("error", function () {
      // CLOSED means the browser gave up (e.g. the session ended): say so, quietly.
      if (source.readyState === EventSource.CLOSED) stopped();
    });
    Object.keys(handlers).forEach(function (type) {
      source.addEventListener(type, function (event) {
        let data;
        try {
          data = JSON.parse(event.data);
        } catch (e) {
          return;
        }
        handlers[type](data);
      });
    });
    return source;
  }

  function stopped() {
    const note = document.getElementById("live-note");
    if (!note) return;
    note.textContent = "Live updates stopped. Reload the page to see what is current.";
    note.hidden = false;
  }

  // --- inbox --------------------------------------------------------------------------

  if (page === "inbox") {
    const badge = document.getElementById("new-items");
    const heading = document.getElementById("inbox-heading");
    let fresh = 0;

    badge.addEventListener("click", function () {
      window.location.reload();
    });

    function showBadge() {
      badge.textContent = fresh + " new — show";
      badge.hidden = false;
    }

    const source = openStream({
      "notification.created": function (ev) {
        const id = ev.notification_id || (ev.data && ev.data.notification_id);
        if (!id || document.getElementById("n-" + id)) return; // already on the page
        fresh += 1;
        showBadge();
      },
      "notification.closed": function (ev) {
        const id = ev.notification_id || (ev.data && ev.data.notification_id);
        const item = id && document.getElementById("n-" + id);
        if (!item || item.closest(".closed")) return;
        const hadFocus = item.contains(document.activeElement);
        const group = item.closest(".run-group");
        item.remove();
        if (group && !group.querySelector(".item")) group.remove();
        updateCounts();
        if (hadFocus) heading.focus();
      },
      cursor_expired: function () {
        if (source) source.close();
        stopped();
      },
    });

    function updateCounts() {
      const needs = document.getElementById("needs-you");
      const count = needs && needs.querySelector(".count");
      if (count) count.textContent = "(" + needs.querySelectorAll(".item").length + ")";
      ["needs-you", "fyi"].forEach(function (id) {
        const section = document.getElementById(id);
        if (section && !section.querySelector(".item") && !section.querySelector(".empty")) {
          const p = document.createElement("p");
          p.className = "empty";
          p.textContent = id === "needs-you" ? "Nothing is waiting for your decision." : "No open updates.";
          section.appendChild(p);
        }
      });
    }
  }

  // --- run page -----------------------------------------------------------------------

  if (page === "run") {
    const runId = body.dataset.runId;
    const renderedVersion = Number(body.dataset.runVersion);
    const requestId = body.dataset.requestId;
    const warning = document.getElementById("run-changed");
    let stale = false;

    const WHY = {
      answered: "This request was answered, here or on another device.",
      expired: "This request expired.",
      superseded: "A newer request replaced this one.",
      cancelled: "The run stopped waiting for this request.",
    };

    function markStale(version, what) {
      // A later, more specific event (answered, expired…) may still refine the message.
      if (stale && !what) return;
      stale = true;
      const form = document.getElementById("respond-form");
      if (form) {
        // Disable, never clear: what the person typed stays where it is.
        form.querySelectorAll("button, input[type=radio]").forEach(function (el) {
          el.disabled = true;
        });
        const text = form.querySelector("textarea");
        if (text) text.readOnly = true;
        form.setAttribute("aria-disabled", "true");
      }
      warning.textContent =
        (what && WHY[what] ? WHY[what] + " " : "This run changed while you were looking" +
          (version ? " (now version " + version + "). " : ". ")) +
        "Reload to see the current state.";
      warning.hidden = false;
    }

    function onRunEvent(ev) {
      if (ev.run_id !== runId) return;
      const data = ev.data || {};
      const version = data.run_version !== undefined ? data.run_version : data.version;
      const rid = data.input_request_id || data.request_id;
      if (requestId && rid === requestId && /answered|expired|superseded|cancelled/.test(ev.type)) {
        // Say what happened to *this* request, not just that the run moved.
        markStale(version, ev.type.replace("input_request.", ""));
        return;
      }
      if (version !== undefined && version !== null && Number(version) !== renderedVersion) {
        markStale(version);
      }
    }

    const types = [
      "run.transitioned",
      "run.updated",
      "input_request.opened",
      "input_request.answered",
      "input_request.expired",
      "input_request.superseded",
      "input_request.cancelled",
    ];
    const handlers = {};
    types.forEach(function (t) {
      handlers[t] = onRunEvent;
    });
    let runSource = null;
    handlers.cursor_expired = function () {
      if (runSource) runSource.close();
      stopped();
    };
    runSource = openStream(handlers);
  }

  // --- settings -----------------------------------------------------------------------

  if (page === "settings") {
    const tzButton = document.getElementById("use-device-timezone");
    const tzInput = document.getElementById("timezone");
    let deviceZone = "";
    try {
      deviceZone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (e) {
      deviceZone = "";
    }
    if (tzButton && deviceZone) {
      tzButton.textContent = "Use this device's timezone (" + deviceZone + ")";
      tzButton.hidden = false;
      tzButton.addEventListener("click", function () {
        tzInput.value = deviceZone;
      });
    }

    const pushButton = document.getElementById("enable-push");
    const status = document.getElementById("push-status");
    const supported =
      "serviceWorker" in navigator && "PushManager" in window && "Notification" in window;
    if (pushButton) {
      if (!supported) {
        status.textContent = "This browser cannot show push notifications.";
      } else {
        pushButton.hidden = false;
        // Permission is asked for only from this click, never on page load.
        pushButton.addEventListener("click", function () {
          pushButton.disabled = true;
          enablePush(status).finally(function () {
            pushButton.disabled = false;
          });
        });
      }
    }
  }

  function keyBytes(base64url) {
    const padded = (base64url + "===".slice((base64url.length + 3) % 4))
      .replace(/-/g, "+")
      .replace(/_/g, "/");
    const raw = window.atob(padded);
    const out = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i += 1) out[i] = raw.charCodeAt(i);
    return out;
  }

  function activated(registration) {
    return new Promise(function (resolve) {
      const worker = registration.installing || registration.waiting || registration.active;
      if (!worker || worker.state === "activated") {
        resolve(registration);
        return;
      }
      worker.addEventListener("statechange", function () {
        if (worker.state === "activated") resolve(registration);
      });
    });
  }

  async function enablePush(status) {
    try {
      status.textContent = "Asking your browser for permission…";
      const permission = await Notification.requestPermission();
      if (permission !== "granted") {
        status.textContent =
          "Browser notifications are blocked for this site. Allow them in your browser's " +
          "site settings, then try again.";
        return;
      }
      status.textContent = "Setting up notifications for this device…";
      const registration = await activated(await navigator.serviceWorker.register("/sw.js"));
      await navigator.serviceWorker.ready;
      const keyResponse = await fetch("/v1/push/vapid-public-key", { credentials: "same-origin" });
      if (!keyResponse.ok) throw new Error("the server did not give its push key");
      const key = (await keyResponse.json()).public_key;
      let subscription = await registration.pushManager.getSubscription();
      if (!subscription) {
        subscription = await registration.pushManager.subscribe({
          userVisibleOnly: true,
          applicationServerKey: keyBytes(key),
        });
      }
      const payload = subscription.toJSON();
      payload.user_agent = navigator.userAgent.slice(0, 300);
      const saved = await fetch("/v1/me/push-subscriptions", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrfToken() },
        body: JSON.stringify(payload),
      });
      if (!saved.ok) {
        let detail = "";
        try {
          detail = (await saved.json()).detail || "";
        } catch (e) {
          detail = "";
        }
        throw new Error(detail || "the server refused the subscription (" + saved.status + ")");
      }
      status.textContent = "Browser notifications are on for this device.";
    } catch (error) {
      status.textContent =
        "Browser notifications could not be turned on: " +
        (error && error.message ? error.message : String(error));
    }
  }
})();
