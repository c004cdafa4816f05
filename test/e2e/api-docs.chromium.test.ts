/**
 * The documentation page renders in a real browser from local assets only: a plain HTTP server serves the page,
 * its whitelisted assets and the OpenAPI document (the gateway-level route check lives elsewhere), and headless
 * Chromium must show the operations of a collection.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Browser, Page } from "playwright-core";
import { chromiumAvailable, launchChromium } from "../helpers/chromium";
import { DOCS_SECURITY_HEADERS, docsAsset, docsHtml } from "../../runtime/docs-page";
import { openApiDocument } from "../../lib/openapi";
import { openApiServiceDocument } from "../../lib/openapi";

const suite = chromiumAvailable("api-docs") ? describe : describe.skip;

type Doc = { paths: Record<string, Record<string, { operationId?: string; tags?: string[]; summary?: string }>> };
function operationOf(doc: object, operationId: string) {
	for (const [path, item] of Object.entries((doc as Doc).paths))
		for (const [method, op] of Object.entries(item)) if (op?.operationId === operationId) return { path, method, summary: op.summary ?? "", tags: op.tags ?? [] };
	throw new Error(`no operation ${operationId}`);
}

describe("API docs index", () => {
	it("links every operation to `?urls.primaryName=<service>#/<tag>/<operationId>` of that service's document", () => {
		const hrefs = [...docsHtml("/api-json").matchAll(/<li><a href="([^"]+)"/g)].map((m) => m[1].replace(/&amp;/g, "&"));
		expect(hrefs.length).toBeGreaterThan(300);
		for (const href of hrefs) {
			const m = /^\?urls\.primaryName=([a-z]+)#\/([^/]+)\/([^/]+)$/.exec(href);
			expect(m).not.toBeNull();
			const [, svc, tag, id] = m!.map(decodeURIComponent);
			expect(operationOf(openApiServiceDocument(svc)!, id).tags[0]).toBe(tag);
		}
	});
});

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
				// The gateway's own docs headers (CSP, X-Frame-Options, nosniff): the page must render under them.
				res.writeHead(status, { ...DOCS_SECURITY_HEADERS, "content-type": type });
				res.end(body);
			};
			if (url.pathname === "/api") return send(200, "text/html; charset=utf-8", docsHtml("/api-json"));
			if (url.pathname === "/api-json") return send(200, "application/json", JSON.stringify(openApiDocument()));
			const svc = /^\/api-json\/([a-z]+)$/.exec(url.pathname);
			const one = svc ? openApiServiceDocument(svc[1]) : null;
			if (one) return send(200, "application/json", JSON.stringify(one));
			const m = /^\/api\/assets\/([^/]+)$/.exec(url.pathname);
			const asset = m ? docsAsset(decodeURIComponent(m[1])) : null;
			if (asset) return send(200, asset.type, asset.body);
			send(404, "application/json", JSON.stringify({ statusCode: 404, message: "not found", error: "Not Found" }));
		});
		await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
		base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
		browser = await launchChromium();
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

		// The page shows one service's document at a time, sections collapsed: open content, then its notes.
		await page.goto(`${base}/api?urls.primaryName=content`, { waitUntil: "load" });
		// The first tag shows once the document is fetched and parsed.
		await page.locator(".opblock-tag").first().waitFor({ state: "visible", timeout: 45_000 });
		await page.locator('.opblock-tag[data-tag="content/notes"]').click();
		// Swagger UI virtualizes long operation lists: only what is near the viewport is in the DOM, so scroll
		// down the page as a reader would until the content/notes section has rendered.
		const byId = page.locator('.opblock-summary-path[data-path="/content/notes/{id}"]');
		for (let i = 0; i < 300 && (await byId.count()) === 0; i++) {
			await page.mouse.wheel(0, 700);
			await page.waitForTimeout(30);
		}
		await byId.first().scrollIntoViewIfNeeded();
		await byId.first().waitFor({ state: "visible", timeout: 10_000 });
		await expect(page.locator('.opblock-tag[data-tag="content/notes"]').count()).resolves.toBe(1);

		const rendered = await page.locator(".opblock-summary-path").evaluateAll((els) => els.map((e) => e.getAttribute("data-path") ?? e.textContent ?? ""));
		const notes = [...new Set(rendered.filter((p) => p === "/content/notes" || p.startsWith("/content/notes/")))];
		expect(notes).toEqual(expect.arrayContaining(["/content/notes/{id}", "/content/notes/count"]));
		expect(notes.sort()).toEqual(
			[
				"/content/notes",
				"/content/notes/bulk",
				"/content/notes/count",
				"/content/notes/cursor",
				"/content/notes/{id}",
				"/content/notes/{id}/destroy",
				"/content/notes/{id}/restore",
			].sort(),
		);
		// Swagger UI lists the problems it meets while loading the document in an errors panel (refs are resolved lazily, so dangling ones are the unit test's job).
		expect(await page.locator(".errors-wrapper").count()).toBe(0);
		expect(errors).toEqual([]);
		expect(external).toEqual([]);
		expect(requested).toEqual(expect.arrayContaining(["/api", "/api/assets/swagger-ui.css", "/api/assets/swagger-ui-bundle.js", "/api/assets/init.js", "/api-json/content"]));
		await page.close();
	});

	/** The operation `operationId` is expanded, its summary shown inside the viewport. */
	async function expectOpened(page: Page, operationId: string) {
		const op = operationOf(openApiDocument(), operationId);
		const block = page
			.locator(".opblock.is-open", { has: page.locator(`.opblock-summary-path[data-path="${op.path}"]`) })
			.filter({ has: page.locator(`.opblock-summary-method`, { hasText: new RegExp(`^${op.method}$`, "i") }) });
		await block.waitFor({ state: "visible", timeout: 15_000 });
		await expect(block.locator(".opblock-summary-description").textContent()).resolves.toBe(op.summary);
		// Opened means shown too: the block is scrolled into the viewport.
		const seen = { el: await block.elementHandle(), height: page.viewportSize()!.height };
		await page.waitForFunction(
			({ el, height }) => {
				const top = el!.getBoundingClientRect().top;
				return top >= 0 && top < height;
			},
			seen,
			{ timeout: 5000 },
		);
	}

	it("a link of the index opens its operation; so does a page loaded with its hash, and a tag's hash", async () => {
		const page = await browser.newPage();
		const errors: string[] = [];
		page.on("pageerror", (e) => errors.push(String(e)));
		page.on("console", (m) => {
			if (m.type() === "error") errors.push(m.text());
		});
		await page.goto(`${base}/api`, { waitUntil: "load" });
		const openContent = () => page.locator('#api-index summary:has(b:text-is("content"))').click();
		await openContent();
		// Another service than the one shown: the link loads that service's document (a page loaded with the hash) and
		// opens the operation, its last one, far below the first screen.
		await page.locator('#api-index a[href$="#/content%2Ftickets/content_tickets_remove"]').click();
		await expectOpened(page, "content_tickets_remove");
		expect(new URL(page.url()).search + new URL(page.url()).hash).toBe("?urls.primaryName=content#/content%2Ftickets/content_tickets_remove");
		// The same service: only the hash changes (no reload), and the operation opens all the same.
		const loads = requested.filter((r) => r === "/api").length;
		await openContent();
		await page.locator('#api-index a[href$="#/content%2Fnotes/content_notes_get"]').click();
		await expectOpened(page, "content_notes_get");
		expect(requested.filter((r) => r === "/api").length).toBe(loads);
		// Reloaded with the hash Swagger UI writes when a reader opens a tag (the tag's name escaped once).
		await page.goto(`${base}/api?urls.primaryName=content#/content%2Fnotes`, { waitUntil: "load" });
		await page.locator('.opblock-tag-section.is-open .opblock-tag[data-tag="content/notes"]').waitFor({ state: "visible", timeout: 15_000 });
		expect(errors).toEqual([]);
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
