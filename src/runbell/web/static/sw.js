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
"use strict";

const FALLBACK_TITLE = "Runbell";
const FALLBACK_BODY = "Something may need your attention. Open Runbell to see it.";

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
    return self.registration.showNotification(title, {
      body: typeof data.body === "string" ? data.body : "",
      tag: data.tag,
      silent: true,
      renotify: false,
      data: { url: self.runbellUrlFor(data), id: data.id || null, retracted: true },
    });
  });
};

self.addEventListener("push", function (event) {
  const data = self.runbellParse(event);
  if (data.replace_only === true) {
    event.waitUntil(self.runbellReplaceShown(data));
    return;
  }
  const options = {
    body: typeof data.body === "string" && data.body ? data.body : FALLBACK_BODY,
    requireInteraction: data.require_interaction === true,
    data: { url: self.runbellUrlFor(data), id: data.id || null },
  };
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
