/**
 * The documentation page renders in a real browser from local assets only: a plain HTTP server serves the page,
 * its whitelisted assets and the OpenAPI document (the gateway-level route check lives elsewhere), and headless
 * Chromium must show the operations of a collection.
 */
import { existsSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { chromium, type Browser } from "playwright-core";
import { docsAsset, docsHtml } from "../../lib/docs-page";
import { openApiDocument } from "../../lib/openapi";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const available = existsSync(CHROMIUM);
if (!available) {
	if (process.env.REQUIRE_SERVERS === "1") throw new Error(`REQUIRE_SERVERS=1 but no Chromium at ${CHROMIUM} (set CHROMIUM_PATH or install chromium)`);
	console.warn(`api-docs e2e skipped: no Chromium at ${CHROMIUM} (set CHROMIUM_PATH, or REQUIRE_SERVERS=1 to make this a failure)`);
}
const suite = available ? describe : describe.skip;

jest.setTimeout(60_000);

suite("API docs page in Chromium", () => {
	let server: Server;
	let base: string;
	let browser: Browser;
	const requested: string[] = [];

	beforeAll(async () => {
		server = createServer((req, res) => {
			const url = new URL(req.url ?? "/", "http://localhost");
			requested.push(url.pathname);
			const send = (status: number, type: string, body: string | Buffer) => {
				res.writeHead(status, { "content-type": type, "content-security-policy": "script-src 'self'; object-src 'none'" });
				res.end(body);
			};
			if (url.pathname === "/api") return send(200, "text/html; charset=utf-8", docsHtml("/api-json"));
			if (url.pathname === "/api-json") return send(200, "application/json", JSON.stringify(openApiDocument()));
			const m = /^\/api\/assets\/([^/]+)$/.exec(url.pathname);
			const asset = m ? docsAsset(decodeURIComponent(m[1])) : null;
			if (asset) return send(200, asset.type, asset.body);
			send(404, "application/json", JSON.stringify({ statusCode: 404, message: "not found", error: "Not Found" }));
		});
		await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
		base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
		browser = await chromium.launch({
			executablePath: CHROMIUM,
			args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
		});
	});

	afterAll(async () => {
		await browser?.close();
		await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
	});

	it("renders the operations of content/notes from local assets", async () => {
		const page = await browser.newPage();
		const errors: string[] = [];
		const external: string[] = [];
		page.on("pageerror", (e) => errors.push(String(e)));
		page.on("request", (r) => {
			if (!r.url().startsWith(base) && !r.url().startsWith("data:")) external.push(r.url());
		});

		await page.goto(`${base}/api`, { waitUntil: "load" });
		// Swagger UI renders the tag sections first; open the content/notes one to get its operations.
		const tag = page.locator('[data-tag="content/notes"]').first();
		await tag.waitFor({ state: "visible", timeout: 45_000 });
		const paths = page.locator("#operations-tag-content\\/notes ~ div .opblock-summary-path, .opblock-tag-section.is-open .opblock-summary-path");
		if ((await page.locator(".opblock-tag-section.is-open [data-path='/content/notes/count']").count()) === 0) await tag.click();
		await page.locator(".opblock-summary-path[data-path='/content/notes/{id}']").first().waitFor({ state: "visible", timeout: 30_000 });

		const rendered = await page.locator(".opblock-summary-path").evaluateAll((els) => els.map((e) => e.getAttribute("data-path") ?? e.textContent ?? ""));
		expect(rendered).toEqual(expect.arrayContaining(["/content/notes/{id}", "/content/notes/count", "/content/notes", "/content/notes/cursor"]));
		expect(await paths.count()).toBeGreaterThanOrEqual(11);
		expect(errors).toEqual([]);
		expect(external).toEqual([]);
		expect(requested).toEqual(expect.arrayContaining(["/api", "/api/assets/swagger-ui.css", "/api/assets/swagger-ui-bundle.js", "/api/assets/init.js", "/api-json"]));
		await page.close();
	});

	it("serves only whitelisted assets", async () => {
		for (const name of ["../package.json", "..%2Fpackage.json", "index.html", "swagger-ui.js", "oauth2-redirect.html"]) {
			const res = await fetch(`${base}/api/assets/${name}`);
			expect(res.status).toBe(404);
		}
		const css = await fetch(`${base}/api/assets/swagger-ui.css`);
		expect(css.headers.get("content-type")).toContain("text/css");
	});
});
