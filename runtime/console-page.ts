/**
 * The browser console (`/console`, sources in console/): its page and its two assets, `app.js` and `app.css`, which
 * esbuild bundles from console/ into console/dist/ (git-ignored). The bundle is built by `npm install` (the `prepare`
 * script, build-console.ts) and, when the sources changed since, again at the first request for the console after a
 * start: a fresh clone's `npm install && npm start` serves it, and nothing is fetched from a CDN.
 *
 * The console is a client of the public REST API only: this module serves files, never data. The page has no inline
 * script or style, so it is sent with a Content-Security-Policy that lets it load its own two files and talk to its
 * own origin, nothing else (docs/console.md).
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { gzipSync } from "node:zlib";

/** console/ beside runtime/ (in the source tree; in the image, dist/console/dist holds the built files only). */
const SOURCES = join(__dirname, "..", "console");
const OUT = join(SOURCES, "dist");
const ENTRY = join(SOURCES, "main.tsx");

/**
 * Its own scripts and styles only (no inline script, no eval), requests to its own origin only (the REST API, the
 * live cursor's EventSource), images of its own, `data:` and `blob:` (a file's preview); never framed, no plugins,
 * no form posted anywhere (every form is handled by the script).
 */
export const CONSOLE_CSP =
	"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
export const CONSOLE_SECURITY_HEADERS: Readonly<Record<string, string>> = Object.freeze({
	"X-Frame-Options": "DENY",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy": "no-referrer",
	"Content-Security-Policy": CONSOLE_CSP,
});

export interface ConsoleAsset {
	body: Buffer;
	type: string;
	etag: string;
	/** Its size gzipped (reported by the test of the 300 KB budget; the gateway sends it as is). */
	gzipped: number;
}

/** The only names served: a fixed list, never a path joined from the request. */
const ASSETS: Record<string, string> = { "app.js": "application/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8" };

/** Every source file of the console (not dist/), path from console/ → content, in a stable order. */
function sources(): Array<[string, Buffer]> {
	const out: Array<[string, Buffer]> = [];
	const walk = (dir: string) => {
		for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
			if (e.name === "dist" || e.name.startsWith(".")) continue;
			const full = join(dir, e.name);
			if (e.isDirectory()) walk(full);
			else out.push([relative(SOURCES, full), readFileSync(full)]);
		}
	};
	walk(SOURCES);
	return out;
}

/** What the bundle is made of: the sources and the versions of esbuild and preact. A change of any rebuilds it. */
function stampOf(): string {
	const h = createHash("sha256");
	for (const [name, body] of sources()) h.update(name).update("\0").update(body).update("\0");
	for (const pkg of ["esbuild", "preact"]) h.update(`${pkg}@${(JSON.parse(readFileSync(require.resolve(`${pkg}/package.json`), "utf8")) as { version: string }).version}`);
	return h.digest("hex");
}

/**
 * Builds the bundle into console/dist/ when its stamp is not the sources' (or `force`). Each build writes into a
 * directory of its own and moves the files into place, so processes building at once (test workers) never serve a
 * half-written file. Returns whether it built.
 */
export async function buildConsole(force = false): Promise<boolean> {
	if (!existsSync(ENTRY)) return false;
	const stamp = stampOf();
	if (!force && readStamp() === stamp && Object.keys(ASSETS).every((n) => existsSync(join(OUT, n)))) return false;
	const esbuild = await import("esbuild");
	mkdirSync(OUT, { recursive: true });
	const tmp = mkdtempSync(join(OUT, ".build-"));
	try {
		await esbuild.build({
			entryPoints: { app: ENTRY },
			outdir: tmp,
			bundle: true,
			minify: true,
			format: "iife",
			target: ["es2020"],
			jsx: "automatic",
			jsxImportSource: "preact",
			legalComments: "none",
			logLevel: "silent",
			charset: "utf8",
		});
		for (const name of Object.keys(ASSETS)) renameSync(join(tmp, name), join(OUT, name));
		writeFileSync(join(tmp, "stamp"), stamp);
		renameSync(join(tmp, "stamp"), join(OUT, "stamp"));
	} finally {
		rmSync(tmp, { recursive: true, force: true });
	}
	return true;
}

function readStamp(): string | undefined {
	try {
		return readFileSync(join(OUT, "stamp"), "utf8");
	} catch {
		return undefined;
	}
}

let loaded: Promise<Map<string, ConsoleAsset>> | undefined;

/**
 * The built assets, read once per process (a build first when the sources changed). A failed build is not kept:
 * the next request tries again, and its message names the cause.
 */
export function consoleAssets(): Promise<Map<string, ConsoleAsset>> {
	loaded ??= (async () => {
		await buildConsole();
		const map = new Map<string, ConsoleAsset>();
		for (const [name, type] of Object.entries(ASSETS)) {
			const body = readFileSync(join(OUT, name));
			map.set(name, { body, type, etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"`, gzipped: gzipSync(body).length });
		}
		return map;
	})();
	loaded.catch(() => (loaded = undefined));
	return loaded;
}

/** Whether `name` is one of the console's assets (any other answers 404 without a build). */
export const isConsoleAsset = (name: string) => Object.prototype.hasOwnProperty.call(ASSETS, name);

const escapeAttr = (s: string) => s.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

/**
 * The page, the same for every path under /console (the script routes by the address). The root client's id, when
 * the node knows it, travels as a data attribute (no inline script): the sign-in form's default `client_id`. Client
 * ids are not secrets (docs/security.md); no secret is ever in the page.
 */
export function consoleHtml(rootClientId: string | undefined, assets: Map<string, ConsoleAsset>): string {
	const v = (name: string) => encodeURIComponent(assets.get(name)?.etag.slice(1, 13) ?? "");
	return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Platform console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/console/assets/app.css?v=${v("app.css")}">
<script defer src="/console/assets/app.js?v=${v("app.js")}"></script>
</head>
<body>
<div id="app" data-root-client="${escapeAttr(rootClientId ?? "")}"><noscript>The console needs JavaScript.</noscript></div>
</body>
</html>
`;
}

/** The root client's id: PLATFORM_ROOT_CLIENT_ID, else the one the first start wrote to DATA_DIR/bootstrap.json. */
export function rootClientIdOf(cfg: { rootClientId?: string; dataDir: string }): string | undefined {
	if (cfg.rootClientId) return cfg.rootClientId;
	try {
		const id = (JSON.parse(readFileSync(join(cfg.dataDir, "bootstrap.json"), "utf8")) as { client_id?: unknown }).client_id;
		return typeof id === "string" && /^[0-9a-f]{24}$/.test(id) ? id : undefined;
	} catch {
		return undefined;
	}
}

/** For the build script: where the files went and their sizes. */
export function consoleBuildReport(): string {
	return Object.keys(ASSETS)
		.map((n) => {
			const p = join(OUT, n);
			return `${relative(process.cwd(), p)} ${statSync(p).size} bytes (${gzipSync(readFileSync(p)).length} gzipped)`;
		})
		.join("\n");
}
