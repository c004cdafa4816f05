/**
 * The interactive API documentation page (`/api`) and its assets (`/api/assets/<name>`). Everything comes from the
 * installed swagger-ui-dist package: the page works offline and loads no third-party CDN, and it has no inline
 * script or style so the gateway can send a strict Content-Security-Policy with it.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { DOC_SERVICES } from "../lib/openapi";
import { openApiDocument } from "../lib/openapi";
import { DOMAINS } from "../catalog";

const ASSET_BASE = "/api/assets";

/**
 * Sent with `/api`, `/api-json` and the page's assets: never framed (clickjacking), no MIME sniffing, and a policy
 * that lets the page load only its own scripts, styles and requests (`'self'`; `data:` images for the icons the
 * stylesheet embeds). No inline script, no eval, no third-party origin, no plugins.
 */
export const DOCS_CSP =
	"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
export const DOCS_SECURITY_HEADERS: Readonly<Record<string, string>> = Object.freeze({
	"X-Frame-Options": "DENY",
	"X-Content-Type-Options": "nosniff",
	"Content-Security-Policy": DOCS_CSP,
});

/** Sets the headers above on a response not yet written. */
export function setDocsSecurityHeaders(res: { setHeader(name: string, value: string): unknown }): void {
	for (const [k, v] of Object.entries(DOCS_SECURITY_HEADERS)) res.setHeader(k, v);
}

function escapeAttr(s: string): string {
	return s.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

const escapeHtml = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
let indexCache: { key: string; html: string } | undefined;

/**
 * The page's first screen, rendered here and usable before any script has run: every service as a collapsed
 * section listing its operations (method, path, summary); each links to the operation in the interactive view
 * below (`?urls.primaryName=<service>#/<tag>/<operationId>`), which loads that service's document only.
 */
function apiIndex(services: readonly string[]): string {
	const key = services.join(",");
	if (indexCache?.key === key) return indexCache.html;
	const doc = openApiDocument() as { paths: Record<string, Record<string, { operationId?: string; tags?: string[]; summary?: string }>> };
	const described = new Map(DOMAINS.map((d) => [d.name, d.description]));
	const sections = services.map((svc) => {
		const ops: string[] = [];
		for (const [p, item] of Object.entries(doc.paths)) {
			if (p !== `/${svc}` && !p.startsWith(`/${svc}/`)) continue;
			for (const [method, op] of Object.entries(item)) {
				if (!op || typeof op !== "object" || !op.operationId) continue;
				const href = `?urls.primaryName=${encodeURIComponent(svc)}#/${encodeURIComponent(op.tags?.[0] ?? svc)}/${encodeURIComponent(op.operationId)}`;
				ops.push(
					`<li><a href="${escapeAttr(href)}"><span class="m m-${method}">${method.toUpperCase()}</span> <code>${escapeHtml(p)}</code></a> ${escapeHtml(op.summary ?? "")}</li>`,
				);
			}
		}
		return `<details><summary><b>${escapeHtml(svc)}</b> ${escapeHtml(described.get(svc) ?? "")} <small>(${ops.length})</small></summary><ul>${ops.join("")}</ul></details>`;
	});
	const html = `<nav id="api-index" aria-label="Services">
<h1>Platform Gateway API</h1>
<p>Every service, collapsed: open one to see its operations; a link opens the operation in the interactive view below, which shows one service at a time (chosen in its top bar). Get a token with <code>POST /auth/token</code> and use <b>Authorize</b>. The whole OpenAPI document: <a href="/api-json">/api-json</a>; one service's: <code>/api-json/&lt;service&gt;</code>.</p>
${sections.join("\n")}
</nav>`;
	indexCache = { key, html };
	return html;
}

/**
 * The page. The spec URL travels as a data attribute that init.js reads, because an inline script carrying it
 * would break the no-inline-script policy.
 */
export function docsHtml(specUrl: string, services: readonly string[] = DOC_SERVICES): string {
	const url = escapeAttr(specUrl);
	// One document per service, chosen in the page's top bar (the first is shown at once); the whole API last.
	const urls = escapeAttr(JSON.stringify([...services.map((s) => ({ url: `${specUrl}/${s}`, name: s })), { url: specUrl, name: "all services (1 MB, slow to render)" }]));
	return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Platform Gateway API</title>
<link rel="stylesheet" href="${ASSET_BASE}/swagger-ui.css">
<link rel="stylesheet" href="${ASSET_BASE}/docs.css">
<link rel="icon" href="data:,">
<script defer src="${ASSET_BASE}/swagger-ui-bundle.js"></script>
<script defer src="${ASSET_BASE}/swagger-ui-standalone-preset.js"></script>
<script defer src="${ASSET_BASE}/init.js"></script>
</head>
<body>
${apiIndex(services)}
<div id="swagger-ui" data-spec-url="${url}" data-spec-urls="${urls}"></div>
<noscript>The interactive documentation needs JavaScript; the OpenAPI description is at <a href="${url}">${url}</a>.</noscript>
</body>
</html>
`;
}

/**
 * Sections collapsed and the models section hidden: Swagger UI renders what is open, so the page is usable as soon
 * as one service's document (tens of KB) is parsed; `?urls.primaryName=<service>` opens another one directly.
 *
 * Deep links (`#/<tag>/<operationId>`, each part URI-escaped, as Swagger UI writes them) are read here, not by
 * Swagger UI: its reader decodes the whole hash before splitting it at "/", so a tag with a slash
 * (`content%2Fnotes`) read as tag `content`, operation `notes`: nothing opened and the address became
 * `#/content/notes`. This one splits first, and also opens a link whose document is already shown (only the hash
 * changes, no reload) and a hash changed by the reader or the back button.
 */
const INIT_JS = `(function () {
  function hashParts() {
    var h = window.location.hash.replace(/^#!?\\/?/, "");
    if (!h) return [];
    var p = h.split("/").map(function (s) { try { return decodeURIComponent(s); } catch (e) { return s; } });
    // A tag written with its slashes unescaped: the last part is the operation.
    return p.length > 2 ? [p.slice(0, -1).join("/"), p[p.length - 1]] : p;
  }
  function DeepLinks() {
    return { statePlugins: { layout: { actions: {
      // Swagger UI's show() without its hash rewrite (which pushes a history entry, and on back would drop the forward ones).
      showQuietly: function (thing) { return { type: "layout_show", payload: { thing: thing, shown: true } }; },
      parseDeepLinkHash: function () {
        return function (sys) {
          var p = hashParts();
          if (!sys.getConfigs().deepLinking || !p.length) return;
          var key = sys.layoutSelectors.isShownKeyFromUrlHashArray(p);
          if (key[0] === "operations") sys.layoutActions.showQuietly(["operations-tag", key[1]]);
          sys.layoutActions.showQuietly(key);
          // Swagger UI scrolls to what it mounts next; a section already on the page is scrolled to here (its DOM id as Swagger UI writes it).
          var shown = document.getElementById(CSS.escape(key.join("-").trim().replace(/\\s/g, "_")));
          if (shown) return sys.layoutActions.scrollToElement(shown);
          sys.layoutActions.scrollTo(key);
          sys.layoutActions.scrollToVirtualizedOperation(key);
        };
      },
    } } } };
  }
  var el = document.getElementById("swagger-ui");
  var url = (el && el.getAttribute("data-spec-url")) || "/api-json";
  var urls = null;
  try { urls = JSON.parse((el && el.getAttribute("data-spec-urls")) || "null"); } catch (e) { urls = null; }
  var opts = { dom_id: "#swagger-ui", deepLinking: true, docExpansion: "none", defaultModelsExpandDepth: -1, validatorUrl: null, plugins: [DeepLinks] };
  if (urls && urls.length && typeof SwaggerUIStandalonePreset !== "undefined") {
    opts.urls = urls;
    opts["urls.primaryName"] = urls[0].name;
    opts.presets = [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset];
    // The top bar's logo is an SVG with an inline <style>, which the CSP refuses: no logo.
    opts.plugins = [SwaggerUIBundle.plugins.DownloadUrl, function () { return { components: { Logo: function () { return null; } } }; }, DeepLinks];
    opts.layout = "StandaloneLayout";
  } else {
    opts.url = url;
  }
  var ui = (window.ui = SwaggerUIBundle(opts));
  var index = document.getElementById("api-index");
  if (index) index.addEventListener("click", function (e) {
    var a = e.target.closest && e.target.closest("a[href]");
    if (!a || !a.hash || e.button || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
    if (a.origin + a.pathname + a.search !== location.origin + location.pathname + location.search) return;
    e.preventDefault();
    if (a.hash !== location.hash) history.pushState(null, "", a.hash);
    ui.layoutActions.parseDeepLinkHash();
  });
  window.addEventListener("hashchange", function () { ui.layoutActions.parseDeepLinkHash(); });
})();
`;

/** The only names served. A fixed whitelist (not a path join on user input) makes traversal impossible. */
const FILES: Record<string, string> = {
	"swagger-ui.css": "text/css; charset=utf-8",
	"swagger-ui-bundle.js": "application/javascript; charset=utf-8",
	"swagger-ui-standalone-preset.js": "application/javascript; charset=utf-8",
	"docs.css": "text/css; charset=utf-8",
};

/** The index's own styles (a file: the CSP allows no inline style). */
const DOCS_CSS = `#api-index{font-family:sans-serif;max-width:1460px;margin:0 auto;padding:12px 20px;color:#3b4151}
#api-index h1{font-size:24px;margin:4px 0}
#api-index p{margin:6px 0 10px}
#api-index details{border-bottom:1px solid #e0e0e0;padding:4px 0}
#api-index summary{cursor:pointer;font-size:15px;padding:4px 0}
#api-index ul{list-style:none;margin:4px 0 8px;padding:0 0 0 12px;columns:2}
#api-index li{font-size:13px;padding:2px 0;break-inside:avoid}
#api-index a{color:#3b4151;text-decoration:none}
#api-index .m{display:inline-block;min-width:52px;font-weight:bold;font-size:11px;color:#fff;border-radius:3px;text-align:center;padding:1px 4px}
#api-index .m-get{background:#61affe}#api-index .m-post{background:#49cc90}#api-index .m-put{background:#fca130}
#api-index .m-patch{background:#50e3c2}#api-index .m-delete{background:#f93e3e}
`;

const cache = new Map<string, { body: Buffer; type: string; etag: string }>();

export function docsAsset(name: string): { body: Buffer; type: string; etag: string } | null {
	if (!Object.prototype.hasOwnProperty.call(FILES, name) && name !== "init.js") return null;
	let asset = cache.get(name);
	if (!asset) {
		// Read once: the bundle is about 1.5 MB and never changes while the process runs.
		asset =
			name === "init.js"
				? { body: Buffer.from(INIT_JS, "utf8"), type: "application/javascript; charset=utf-8", etag: "" }
				: name === "docs.css"
					? { body: Buffer.from(DOCS_CSS, "utf8"), type: FILES[name], etag: "" }
					: { body: readFileSync(join(dirname(require.resolve("swagger-ui-dist/package.json")), name)), type: FILES[name], etag: "" };
		asset.etag = `"${createHash("sha256").update(asset.body).digest("base64url").slice(0, 27)}"`;
		cache.set(name, asset);
	}
	return asset;
}
