// Runbell service worker: shows web pushes and reports what happened to them.
//
// A push carries a pointer, never the notification itself (runbell/channels/webpush.py
// push_payload): {v, id, tag, title, body, url, urgency, require_interaction, ts}.
// `tag` is the collapse key, so a newer push about the same run replaces the older one
// on screen. Receipts (displayed, opened, dismissed) are telemetry only: opening is not
// approval and dismissing is not rejection.
//
// `replace_only: true` marks a retraction: someone handled the notification on another
// device, so the one shown here (same tag) is swapped for a neutral "handled" text,
// silently; when none is shown (already opened or dismissed here) nothing new appears.
//
// `actions` ([{action, title}], neutral titles) and `token` let a person act from the
// notification itself (runbell/flows/push_actions.py): a button click posts
// {token, action} to /v1/push-actions, no session needed (the token is the credential,
// single use, and exists only inside the encrypted push and this notification's data).
// Acknowledge and Snooze are always offered; Approve/Reject only where the request's
// policy rule allows it. A device shows the first `Notification.maxActions` (Chromium: 2).
// A refused action (changed since, used, expired) leaves a neutral "not done" notice
// under the same tag; the server also pushes the current state in its place. Its words
// come with the push (`not_done: {title, body}`, in the recipient's language); the
// English constants below are only for a push without them.
"use strict";

const FALLBACK_TITLE = "Runbell";
const FALLBACK_BODY = "Something may need your attention. Open Runbell to see it.";
const ACTIONS = ["acknowledge", "snooze", "approve", "reject"];
const NOT_DONE_TITLE = "Not done";
const NOT_DONE_BODY = "This changed since it was sent. Open Runbell to see it now.";

self.addEventListener("install", function () {
  self.skipWaiting();
});

self.addEventListener("activate", function (event) {
  event.waitUntil(self.clients.claim());
});

// Where a click goes: always this origin's deep link for the notification id (the page
// behind it signs in and checks access); never another origin, whatever the payload says.
self.runbellUrlFor = function (data) {
  const origin = self.location.origin;
  if (data && typeof data.id === "string" && data.id) {
    return origin + "/n/" + encodeURIComponent(data.id);
  }
  if (data && typeof data.url === "string") {
    try {
      const url = new URL(data.url, origin);
      if (url.origin === origin) return url.href;
    } catch (e) {
      // fall through
    }
  }
  return origin + "/";
};

self.runbellParse = function (event) {
  if (!event.data) return {};
  try {
    const data = event.data.json();
    return data && typeof data === "object" ? data : {};
  } catch (e) {
    return {};
  }
};

function receipt(id, kind) {
  if (!id) return Promise.resolve();
  return fetch("/v1/notifications/" + encodeURIComponent(id) + "/receipts", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ kind: kind, channel: "webpush" }),
  }).catch(function () {
    // Telemetry: a failure changes nothing for the person.
  });
}

self.runbellReplaceShown = function (data) {
  if (typeof data.tag !== "string" || !data.tag) return Promise.resolve();
  return self.registration.getNotifications({ tag: data.tag }).then(function (shown) {
    if (!shown.length) return undefined;
    const title = typeof data.title === "string" && data.title ? data.title : FALLBACK_TITLE;
    // A retraction says "handled"; a newer notification sent in place of a refused
    // action's brings its own buttons (runbellOptions).
    const options = self.runbellOptions(data);
    options.body = typeof data.body === "string" ? data.body : "";
    options.tag = data.tag;
    options.silent = true;
    options.renotify = false;
    options.requireInteraction = false;
    if (!options.actions) options.data.retracted = true;
    return self.registration.showNotification(title, options);
  });
};

// The options of a shown notification: its buttons and their token when the push has
// them (only well-formed ones; the token stays in `data`, never in a visible text).
self.runbellOptions = function (data) {
  const options = {
    body: typeof data.body === "string" && data.body ? data.body : FALLBACK_BODY,
    requireInteraction: data.require_interaction === true,
    data: { url: self.runbellUrlFor(data), id: data.id || null },
  };
  if (typeof data.token === "string" && data.token && Array.isArray(data.actions)) {
    const actions = data.actions.filter(function (a) {
      return a && ACTIONS.indexOf(a.action) >= 0 && typeof a.title === "string";
    });
    if (actions.length) {
      options.actions = actions.map(function (a) {
        return { action: a.action, title: a.title };
      });
      options.data.token = data.token;
      options.data.tag = typeof data.tag === "string" ? data.tag : null;
      const words = data.not_done;
      if (words && typeof words.title === "string" && typeof words.body === "string") {
        options.data.not_done = { title: words.title, body: words.body };
      }
    }
  }
  return options;
};

// A button was pressed: post it with the token. Resolves to the server's answer
// ({ok, status, body}); a refusal leaves a neutral notice under the same tag.
self.runbellAct = function (data, action) {
  return fetch("/v1/push-actions", {
    method: "POST",
    credentials: "omit",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token: data.token, action: action }),
  })
    .then(function (response) {
      return response
        .json()
        .catch(function () {
          return null;
        })
        .then(function (body) {
          return { ok: response.ok, status: response.status, body: body };
        });
    })
    .catch(function () {
      return { ok: false, status: 0, body: null };
    })
    .then(function (outcome) {
      self.runbellLastAction = outcome;
      if (outcome.ok) return outcome;
      const words = data.not_done || {};
      const options = {
        body: words.body || NOT_DONE_BODY,
        silent: true,
        data: { url: data.url || self.runbellUrlFor(data), id: data.id || null },
      };
      if (data.tag) options.tag = data.tag;
      const title = words.title || NOT_DONE_TITLE;
      return self.registration.showNotification(title, options).then(function () {
        return outcome;
      });
    });
};

self.addEventListener("push", function (event) {
  const data = self.runbellParse(event);
  if (data.replace_only === true) {
    event.waitUntil(self.runbellReplaceShown(data));
    return;
  }
  const options = self.runbellOptions(data);
  if (typeof data.tag === "string" && data.tag) options.tag = data.tag;
  const title = typeof data.title === "string" && data.title ? data.title : FALLBACK_TITLE;
  event.waitUntil(
    self.registration.showNotification(title, options).then(function () {
      return receipt(data.id, "displayed");
    })
  );
});

self.addEventListener("notificationclick", function (event) {
  const notification = event.notification;
  const data = notification.data || {};
  const url = data.url || self.runbellUrlFor(data);
  notification.close();
  if (event.action && ACTIONS.indexOf(event.action) >= 0 && data.token) {
    event.waitUntil(self.runbellAct(data, event.action));
    return;
  }
  event.waitUntil(
    Promise.all([
      self.clients
        .matchAll({ type: "window", includeUncontrolled: true })
        .then(function (windows) {
          for (const client of windows) {
            if (client.url === url && "focus" in client) return client.focus();
          }
          return self.clients.openWindow(url);
        })
        .catch(function () {
          // No window could be opened (e.g. no user activation): nothing else to do.
        }),
      receipt(data.id, "opened"),
    ])
  );
});

self.addEventListener("notificationclose", function (event) {
  const data = event.notification.data || {};
  event.waitUntil(receipt(data.id, "dismissed"));
});
