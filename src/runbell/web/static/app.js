// Runbell web app: small progressive enhancements on server-rendered pages.
// Everything here is optional: reading and answering work without JavaScript.
// Rules: never steal focus, never touch what the person is typing, never submit or
// reload on its own.
"use strict";

(function () {
  const body = document.body;
  const page = body.dataset.page;

  // The page's language (web/js_words.py): each text below in English, looked up in
  // the translations the page carries; English pages carry none.
  const lang = document.documentElement.lang || "en";
  let WORDS = {};
  try {
    const carried = document.getElementById("rb-words");
    WORDS = carried ? JSON.parse(carried.textContent) : {};
  } catch (e) {
    WORDS = {};
  }
  function t(text, values) {
    let out = WORDS[text] || text;
    Object.keys(values || {}).forEach(function (name) {
      out = out.split("{" + name + "}").join(String(values[name]));
    });
    return out;
  }

  function csrfToken() {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  }

  // --- countdowns ---------------------------------------------------------------------

  function relative(target, now) {
    let seconds = Math.round((target - now) / 1000);
    const future = seconds >= 0;
    seconds = Math.abs(seconds);
    if (lang !== "en") {
      // The browser's own words for "in 14 minutes" / "14 minutes ago" in the language.
      if (seconds < 60) return future ? t("in less than a minute") : t("expired less than a minute ago");
      const rtf = new Intl.RelativeTimeFormat(lang, { numeric: "always" });
      const sign = future ? 1 : -1;
      let said;
      if (seconds < 3600) said = rtf.format(sign * Math.floor(seconds / 60), "minute");
      else if (seconds < 86400) said = rtf.format(sign * Math.floor(seconds / 3600), "hour");
      else said = rtf.format(sign * Math.floor(seconds / 86400), "day");
      return future ? said : t("expired {ago}", { ago: said });
    }
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

  // The run page can gain a countdown live (a new request), so it always ticks.
  if (document.querySelector("[data-countdown]") || page === "run") {
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
    note.textContent = t("Live updates stopped. Reload the page to see what is current.");
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
        else if (group) {
          // The group's count stays in view when it is collapsed: keep it true.
          const count = group.querySelector(".group-count");
          const left = group.querySelectorAll(".item").length;
          if (count) count.textContent = left + " open";
          const ack = group.querySelector(".group-ack");
          if (ack && left < 2) ack.remove();
        }
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
          p.textContent = id === "needs-you" ? t("Nothing is waiting for your decision.") : t("No open updates.");
          section.appendChild(p);
        }
      });
    }
  }

  // --- run page -----------------------------------------------------------------------
  //
  // When the feed says this run moved on (the runtime finished it, someone answered, a
  // new request opened), the page fetches itself again and swaps in the parts marked
  // data-live: state, decision, outcome, facts, details, timeline, notifications. The
  // notice it shows is news, not an error (red is for a refused answer only). A form the
  // person may have used is protected: if it no longer applies it is disabled, never
  // cleared, and it is replaced only when nothing was typed or chosen in it, never when
  // the same request is still open against an older run version (that needs a reload,
  // so nobody answers what they have not read).

  if (page === "run") {
    const runId = body.dataset.runId;
    const notice = document.getElementById("run-changed");
    const LIVE = ["state", "cancel", "amendments", "outcome", "operations", "job", "facts", "details", "timeline", "notes"];
    const WHY = {
      answered: t("This request was answered, here or on another device."),
      expired: t("This request expired."),
      superseded: t("A newer request replaced this one."),
      cancelled: t("The run stopped waiting for this request."),
    };
    let why = ""; // what happened to the request this page's form is for
    let timer = null;
    let due = 0;
    let busy = false;
    let again = false;

    function formRequest(root) {
      const form = root.querySelector("#respond-form");
      if (!form) return null;
      const value = function (name) {
        const input = form.querySelector('input[name="' + name + '"]');
        return input ? input.value : "";
      };
      return {
        form: form,
        action: form.getAttribute("action"),
        runVersion: value("expected_run_version"),
        requestVersion: value("expected_request_version"),
      };
    }

    function touched(form) {
      if (form.querySelector("input[type=radio]:checked")) return true;
      const text = form.querySelector("textarea");
      return Boolean(text && text.value.trim());
    }

    function closeForm(form) {
      // Disable, never clear: what the person typed stays where it is.
      form.querySelectorAll("button, input[type=radio]").forEach(function (el) {
        el.disabled = true;
      });
      const text = form.querySelector("textarea");
      if (text) text.readOnly = true;
      form.setAttribute("aria-disabled", "true");
    }

    function swap(mine, theirs) {
      if (!mine || !theirs) return;
      const hadFocus = mine.contains(document.activeElement);
      const fresh = document.adoptNode(theirs);
      mine.replaceWith(fresh);
      if (hadFocus) {
        const heading =
          fresh.querySelector("[tabindex='-1']") || document.getElementById("run-title");
        if (heading) heading.focus();
      }
    }

    function live(root, name) {
      return root.querySelector('[data-live="' + name + '"]');
    }

    function apply(fresh) {
      const before = Number(body.dataset.runVersion);
      const now = Number(fresh.body.dataset.runVersion);
      const highlighted = document.querySelector(".notes > li.highlight");
      LIVE.forEach(function (name) {
        swap(live(document, name), live(fresh, name));
      });
      if (highlighted) {
        // The notification this page was opened from stays marked (/runs/… does not know it).
        const note = document.getElementById(highlighted.id);
        if (note) {
          note.classList.add("highlight");
          note.setAttribute("aria-current", "true");
        }
      }

      const mine = formRequest(document);
      const theirs = formRequest(fresh);
      let closed = "";
      if (!mine) {
        swap(live(document, "decision"), live(fresh, "decision"));
      } else if (
        theirs &&
        theirs.action === mine.action &&
        theirs.requestVersion === mine.requestVersion &&
        theirs.runVersion === mine.runVersion
      ) {
        // Nothing changed for the decision on this page.
      } else if (theirs && theirs.action === mine.action) {
        // The same request is still open, but the run changed under it.
        closeForm(mine.form);
        closed = t("The run changed after this form was shown, so the form is closed: read the run again, then reload the page to answer.");
      } else if (!touched(mine.form)) {
        swap(live(document, "decision"), live(fresh, "decision"));
      } else {
        closeForm(mine.form);
        closed = t("The form is closed; what you entered is still in it, and nothing was sent.");
      }
      body.dataset.runVersion = String(now);

      const stateBefore = body.dataset.runState;
      const stateNow = fresh.body.dataset.runState;
      body.dataset.runState = stateNow || "";
      if (now === before && !why && !closed) return;
      const state = document.getElementById("run-state");
      const parts = [];
      if (why) parts.push(WHY[why]);
      // Say what changed: a new state, or (same state) the newest change in words — the
      // review of a finished run is not "now completed" (issue 16).
      const sameState = now !== before && stateNow === stateBefore;
      const change =
        sameState && fresh.body.dataset.lastChange
          ? fresh.body.dataset.lastChange
          : t("the run is now {state}", { state: state ? state.textContent.trim().toLowerCase() : t("changed") });
      parts.push(t("Updated: {change} (version {version}).", { change: change, version: now }));
      if (closed) parts.push(closed);
      notice.textContent = parts.join(" ");
      notice.hidden = false;
      why = "";
    }

    async function refresh() {
      if (busy) {
        again = true;
        return;
      }
      busy = true;
      try {
        do {
          again = false;
          const response = await fetch("/runs/" + encodeURIComponent(runId), {
            credentials: "same-origin",
            cache: "no-store",
            headers: { Accept: "text/html" },
          });
          if (!response.ok || response.redirected) {
            // Signed out, or no longer allowed to see the run: stop, and say so.
            if (runSource) runSource.close();
            stopped();
            return;
          }
          const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
          if (fresh.body && fresh.body.dataset.page === "run") apply(fresh);
        } while (again);
      } catch (e) {
        // A network blip: the next event from the feed tries again.
      } finally {
        busy = false;
      }
    }

    function onRunEvent(ev) {
      if (ev.run_id !== runId) return;
      const rid = (ev.data || {}).input_request_id;
      const mine = formRequest(document);
      if (mine && rid && mine.action.endsWith("/input-requests/" + rid + "/respond")) {
        const what = ev.type.replace("input_request.", "");
        if (WHY[what]) why = what;
      }
      // Events of one change arrive together: one fetch for the lot. Progress is only a
      // heartbeat, so a chatty runtime costs at most one fetch a second.
      schedule(ev.type === "run.progress" ? 1000 : 100);
    }

    function schedule(delay) {
      const at = Date.now() + delay;
      if (timer && due <= at) return; // a fetch is already due sooner
      if (timer) window.clearTimeout(timer);
      due = at;
      timer = window.setTimeout(function () {
        timer = null;
        refresh();
      }, delay);
    }

    const types = [
      "run.transitioned",
      "run.updated",
      "run.progress",
      "input_request.opened",
      "input_request.answered",
      "input_request.expired",
      "input_request.superseded",
      "input_request.cancelled",
      "notification.created",
      "notification.closed",
      "operation.updated",
      "run.reviewed",
      "run.review_decided",
      "run.cancel_requested",
      "run.stalled",
      "run.recovered",
      "amendment.proposed",
      "amendment.approved",
      "amendment.rejected",
      "run.dependency",
      "run.linked",
      "run.owner_changed",
      "operation.superseded",
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

  // --- runs overview ------------------------------------------------------------------
  //
  // When the feed says a run moved on (a transition, a request opened or answered, a
  // notification raised or closed), the page fetches itself again and swaps in the
  // groups. Progress is a heartbeat: at most one fetch every five seconds for it. Focus
  // is never taken: if it was inside the groups it goes to the heading.

  if (page === "runs") {
    const notice = document.getElementById("runs-changed");
    const heading = document.getElementById("runs-heading");
    let timer = null;
    let due = 0;
    let busy = false;
    let again = false;

    async function refreshRuns() {
      if (busy) {
        again = true;
        return;
      }
      busy = true;
      try {
        do {
          again = false;
          const response = await fetch(window.location.pathname + window.location.search, {
            credentials: "same-origin",
            cache: "no-store",
            headers: { Accept: "text/html" },
          });
          if (!response.ok || response.redirected) {
            if (runsSource) runsSource.close();
            stopped();
            return;
          }
          const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
          const theirs = fresh.querySelector('[data-live="groups"]');
          const mine = document.querySelector('[data-live="groups"]');
          if (!fresh.body || fresh.body.dataset.page !== "runs" || !theirs || !mine) continue;
          if (theirs.innerHTML === mine.innerHTML) continue;
          const hadFocus = mine.contains(document.activeElement);
          mine.replaceWith(document.adoptNode(theirs));
          if (hadFocus && heading) heading.focus();
          notice.textContent = t("Updated: the runs below are as they are now.");
          notice.hidden = false;
        } while (again);
      } catch (e) {
        // A network blip: the next event from the feed tries again.
      } finally {
        busy = false;
      }
    }

    function scheduleRuns(delay) {
      const at = Date.now() + delay;
      if (timer && due <= at) return;
      if (timer) window.clearTimeout(timer);
      due = at;
      timer = window.setTimeout(function () {
        timer = null;
        refreshRuns();
      }, delay);
    }

    const runTypes = [
      "run.created",
      "run.transitioned",
      "run.updated",
      "run.progress",
      "run.stalled",
      "run.recovered",
      "run.reviewed",
      "run.review_decided",
      "run.cancel_requested",
      "run.owner_changed",
      "operation.superseded",
      "input_request.opened",
      "input_request.answered",
      "input_request.expired",
      "input_request.superseded",
      "input_request.cancelled",
      "notification.created",
      "notification.closed",
    ];
    const runHandlers = {};
    runTypes.forEach(function (t) {
      runHandlers[t] = function (ev) {
        scheduleRuns(ev.type === "run.progress" ? 5000 : 150);
      };
    });
    let runsSource = null;
    runHandlers.cursor_expired = function () {
      if (runsSource) runsSource.close();
      stopped();
    };
    runsSource = openStream(runHandlers);
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
      tzButton.textContent = t("Use this device's timezone ({zone})", { zone: deviceZone });
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
        status.textContent = t("This browser cannot show push notifications.");
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
      status.textContent = t("Asking your browser for permission…");
      const permission = await Notification.requestPermission();
      if (permission !== "granted") {
        status.textContent = t("Browser notifications are blocked for this site. Allow them in your browser's site settings, then try again.");
        return;
      }
      status.textContent = t("Setting up notifications for this device…");
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
      status.textContent = t("Browser notifications are on for this device.");
    } catch (error) {
      status.textContent = t("Browser notifications could not be turned on: {why}", {
        why: error && error.message ? error.message : String(error),
      });
    }
  }
})();
