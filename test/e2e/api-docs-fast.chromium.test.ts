/**
 * Issue 13 item 5: /api is usable at once. The gateway's page (under its strict CSP) loads one service's document
 * (selectable in the top bar) with sections collapsed; the time from navigation to the first usable section is
 * in the HTML itself, painted with scripts off (its first paint, budget 1 s, is timed by `npm run bench:api-docs`). The
 * full document stays at /api-json; GET / points to /api.
 */
import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { DOMAINS } from "../../catalog";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const available = existsSync(CHROMIUM);
if (!available && process.env.REQUIRE_SERVERS === "1") throw new Error(`REQUIRE_SERVERS=1 but no Chromium at ${CHROMIUM}`);
const suite = available ? describe : describe.skip;

jest.setTimeout(120_000);

suite("/api renders at once (Chromium, the gateway's own page and CSP)", () => {
	let p: TestPlatform;
	let browser: Browser;

	beforeAll(async () => {
		p = await bootPlatform();
		browser = await chromium.launch({
			executablePath: CHROMIUM,
			args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
		});
	});
	afterAll(async () => {
		await browser?.close();
		await p?.cleanup();
	});

	/** Opens `path` and waits for its index of services; the page's errors are collected. */
	async function open(path: string) {
		const page = await browser.newPage();
		const errors: string[] = [];
		page.on("pageerror", (e) => errors.push(String(e)));
		page.on("console", (m) => {
			if (m.type() === "error") errors.push(m.text());
		});
		await page.goto(`${p.url}${path}`, { waitUntil: "commit" });
		await page.locator("#api-index details").first().waitFor({ state: "visible", timeout: 30_000 });
		return { page, errors };
	}

	it("the page is usable before any script runs: every service, collapsed, with its operations, in the HTML itself", async () => {
		// With scripts off, the index is painted from the HTML alone: what makes /api usable at once (its first paint is
		// timed by `npm run bench:api-docs`, not here: a timed test fails on a busy machine, not on a slow page).
		const bare = await browser.newContext({ javaScriptEnabled: false });
		const still = await bare.newPage();
		await still.goto(`${p.url}/api`, { waitUntil: "domcontentloaded" });
		expect(await still.locator("#api-index details summary b").allTextContents()).toEqual(DOMAINS.map((d) => d.name));
		expect(await still.locator("#api-index details[open]").count()).toBe(0);
		expect(await still.locator('#api-index a[href="?urls.primaryName=content#/content%2Fnotes/content_notes_get"]').count()).toBe(1);
		await bare.close();

		const { page, errors } = await open("/api");
		const sections = await page.locator("#api-index details summary b").allTextContents();
		expect(sections).toEqual(DOMAINS.map((d) => d.name));
		// Collapsed: nothing open until the reader opens a section.
		expect(await page.locator("#api-index details[open]").count()).toBe(0);
		await page.locator("#api-index summary", { hasText: "content" }).first().click();
		const link = page.locator('#api-index a[href="?urls.primaryName=content#/content%2Fnotes/content_notes_get"]');
		await link.waitFor({ state: "visible", timeout: 5000 });
		// The interactive view then renders one service's document, collapsed, with the service selector.
		await page.locator(".opblock-tag").first().waitFor({ state: "visible", timeout: 60_000 });
		const tags = await page.locator(".opblock-tag").evaluateAll((els) => els.map((e) => e.getAttribute("data-tag")));
		expect(tags).toEqual(expect.arrayContaining(["auth", "auth/grants"]));
		expect(await page.locator(".opblock").count()).toBe(0);
		const options = await page.locator(".topbar select option").allTextContents();
		expect(options).toEqual([...DOMAINS.map((d) => d.name), "all services (1 MB, slow to render)"]);
		expect(errors).toEqual([]);
		await page.close();
	});

	it("another service opens directly and its operations expand", async () => {
		const { page, errors } = await open("/api?urls.primaryName=content");
		await page.locator('.opblock-tag[data-tag="content/notes"]').first().waitFor({ state: "visible", timeout: 60_000 });
		await page.locator('.opblock-tag[data-tag="content/notes"]').click();
		await page.locator('.opblock-summary-path[data-path="/content/notes/{id}"]').first().waitFor({ state: "visible", timeout: 10_000 });
		expect(errors).toEqual([]);
		await page.close();
	});

	it("the page keeps its strict CSP; the full document stays at /api-json; per-service documents; GET / points to /api", async () => {
		const html = await fetch(`${p.url}/api`);
		expect(html.headers.get("content-security-policy")).toBe(
			"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
		);
		const full = (await (await fetch(`${p.url}/api-json`)).json()) as { paths: Record<string, unknown> };
		const content = (await (await fetch(`${p.url}/api-json/content`)).json()) as { paths: Record<string, unknown>; components: { schemas: Record<string, unknown> } };
		expect(Object.keys(full.paths).length).toBeGreaterThan(300);
		expect(Object.keys(content.paths).every((k) => k.startsWith("/content/"))).toBe(true);
		expect(Object.keys(content.paths)).toContain("/content/notes/{id}");
		expect(content.components.schemas.ContentNotes).toBeDefined();
		expect(content.components.schemas.IdentityUsersCreate).toBeUndefined();
		const none = await p.http("GET", "/api-json/nope");
		expect(none.status).toBe(404);
		expect(none.body).toEqual({
			statusCode: 404,
			message: expect.stringMatching(/^no API document for 'nope' \(services: auth, domain, .*; the whole API: \/api-json\)$/),
			error: "Not Found",
		});
		const root = await p.http("GET", "/");
		expect(root.status).toBe(200);
		expect(root.body.docs).toBe("/api");
	});
});
