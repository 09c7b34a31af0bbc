// Starts the API reference on /docs (Swagger UI) or /redoc (ReDoc) from bundles this
// server serves itself (see runbell.web.apidocs): no CDN, no inline script.
"use strict";

(function () {
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
      presets: [window.SwaggerUIBundle.presets.apis],
    });
  }
  const redoc = document.getElementById("redoc");
  if (redoc && window.Redoc) {
    window.Redoc.init(redoc.dataset.openapiUrl, { hideDownloadButton: false }, redoc);
  }
})();
