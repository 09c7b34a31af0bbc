// Starts the API reference on /docs (Swagger UI) or /redoc (ReDoc) from bundles this
// server serves itself (see runbell.web.apidocs): no CDN, no inline script.
"use strict";

(function () {
  // Markup the bundles get wrong for assistive technology (axe-core, issue 16 item 11),
  // put right in the rendered DOM rather than in a fork of the bundle. Both bundles render
  // with React after load and re-render parts on every expand, so an observer re-applies
  // these small, idempotent fixes to whatever appears. React keeps the DOM attributes it
  // did not set, and only rewrites the ones it set when their value changes.
  function fix(root) {
    // Swagger UI titles the document with a second <h1> and its tag groups with <h3>: read
    // the title as a level-2 heading, so the outline under our <h1> is 1, 2, 3 (heading-order).
    root.querySelectorAll(".swagger-ui .info h1.title:not([aria-level])").forEach((h) => {
      h.setAttribute("aria-level", "2");
    });
    // Swagger UI puts the deep link (<a href="#/tag/op">) inside the operation's expand
    // <button>: a link inside a button (nested-interactive). Without its href the <a> is
    // plain text; a click still reaches the button, and deep linking still writes the
    // address bar and opens a linked operation on load.
    root.querySelectorAll(".opblock-summary-control a[href]").forEach((a) => {
      a.removeAttribute("href");
    });
    // An opened Swagger UI operation: its responses table is an unnamed role="region"
    // (landmark-unique, one per opened operation), its examples a scrolling <pre> that a
    // keyboard cannot reach (scrollable-region-focusable).
    root.querySelectorAll("table.responses-table[role='region']:not([aria-label])").forEach((t) => {
      const op = t.closest(".opblock");
      const name = op && op.querySelector(".opblock-summary-path");
      const method = op && op.querySelector(".opblock-summary-method");
      const what = [method && method.textContent, name && name.dataset.path].filter(Boolean);
      t.setAttribute("aria-label", `Responses of ${what.join(" ") || "this operation"}`);
    });
    root.querySelectorAll(".swagger-ui pre.microlight:not([tabindex])").forEach((pre) => {
      pre.setAttribute("tabindex", "0");
    });
    // ReDoc titles an operation's "path Parameters" / "Request Body schema" with <h5> right
    // under the operation's <h2>, then "Responses" with <h3>: read them as level 3.
    root.querySelectorAll("#redoc h5:not([aria-level])").forEach((h) => {
      h.setAttribute("aria-level", "3");
    });
    // ReDoc's example and variant drop-downs are a bare <select> beside a caption such as
    // "Example" (select-name): name it after that caption.
    root.querySelectorAll("#redoc select:not([aria-label])").forEach((s) => {
      const caption = s.parentElement && s.parentElement.previousElementSibling;
      const text = caption ? caption.textContent.trim() : "";
      s.setAttribute("aria-label", text || "Choose a variant");
    });
  }
  function watch(el) {
    fix(el);
    new MutationObserver(() => fix(el)).observe(el, { childList: true, subtree: true });
  }

  const swagger = document.getElementById("swagger-ui");
  if (swagger && window.SwaggerUIBundle) {
    window.ui = window.SwaggerUIBundle({
      url: swagger.dataset.openapiUrl,
      dom_id: "#swagger-ui",
      layout: "BaseLayout",
      deepLinking: true,
      showExtensions: true,
      showCommonExtensions: true,
      validatorUrl: null, // the online validator is another site: never called
      // The default highlighter theme draws numbers in #d36363 on #333 (3.5:1): examples
      // are plain light text on the dark block instead (color-contrast).
      syntaxHighlight: { activated: false },
      presets: [window.SwaggerUIBundle.presets.apis],
    });
    watch(swagger);
  }
  const redoc = document.getElementById("redoc");
  if (redoc && window.Redoc) {
    // ReDoc's default palette is under WCAG AA in four places (axe color-contrast): red
    // inline code (3.5-3.9:1), grey sub-headings (2.9:1) and the response tabs' status
    // colours on the dark samples panel (3.5:1). These values are >= 5:1 on their grounds.
    const theme = {
      colors: {
        text: { secondary: "#5c6670" },
        responses: {
          success: { tabTextColor: "#7ee2a8" },
          error: { tabTextColor: "#ff8a80" },
          redirect: { tabTextColor: "#ffd180" },
          info: { tabTextColor: "#9ecbff" },
        },
      },
      typography: { code: { color: "#b3261e" } },
    };
    window.Redoc.init(redoc.dataset.openapiUrl, { hideDownloadButton: false, theme }, redoc);
    watch(redoc);
  }
})();
