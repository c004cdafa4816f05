/**
 * The interactive API documentation page (`/api`) and its assets (`/api/assets/<name>`). Everything comes from the
 * installed swagger-ui-dist package: the page works offline and loads no third-party CDN, and it has no inline
 * script or style so the gateway can send a strict Content-Security-Policy with it.
 */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";

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

/**
 * The page. The spec URL travels as a data attribute that init.js reads, because an inline script carrying it
 * would break the no-inline-script policy.
 */
export function docsHtml(specUrl: string): string {
	const url = escapeAttr(specUrl);
	return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Platform Gateway API</title>
<link rel="stylesheet" href="${ASSET_BASE}/swagger-ui.css">
</head>
<body>
<div id="swagger-ui" data-spec-url="${url}"></div>
<noscript>The interactive documentation needs JavaScript; the OpenAPI description is at <a href="${url}">${url}</a>.</noscript>
<script src="${ASSET_BASE}/swagger-ui-bundle.js"></script>
<script src="${ASSET_BASE}/init.js"></script>
</body>
</html>
`;
}

const INIT_JS = `(function () {
  var el = document.getElementById("swagger-ui");
  var url = (el && el.getAttribute("data-spec-url")) || "/api-json";
  window.ui = SwaggerUIBundle({ url: url, dom_id: "#swagger-ui", deepLinking: true });
})();
`;

/** The only names served. A fixed whitelist (not a path join on user input) makes traversal impossible. */
const FILES: Record<string, string> = {
	"swagger-ui.css": "text/css; charset=utf-8",
	"swagger-ui-bundle.js": "application/javascript; charset=utf-8",
};

const cache = new Map<string, { body: Buffer; type: string }>();

export function docsAsset(name: string): { body: Buffer; type: string } | null {
	if (!Object.prototype.hasOwnProperty.call(FILES, name) && name !== "init.js") return null;
	let asset = cache.get(name);
	if (!asset) {
		// Read once: the bundle is about 1.5 MB and never changes while the process runs.
		asset =
			name === "init.js"
				? { body: Buffer.from(INIT_JS, "utf8"), type: "application/javascript; charset=utf-8" }
				: { body: readFileSync(join(dirname(require.resolve("swagger-ui-dist/package.json")), name)), type: FILES[name] };
		cache.set(name, asset);
	}
	return asset;
}
