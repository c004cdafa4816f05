/**
 * Issue 13 item 5: /api is usable at once. The gateway's page (under its strict CSP) loads one service's document
 * (selectable in the top bar) with sections collapsed; the time from navigation to the first usable section is
 * measured in Chromium and must stay under 1 s. The full document stays at /api-json; GET / points to /api.
 */
import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { DOMAINS } from "../../catalog";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const available = existsSync(CHROMIUM);
if (!available && process.env.REQUIRE_SERVERS === "1") throw new Error(`REQUIRE_SERVERS=1 but no Chromium at ${CHROMIUM}`);
const suite = available ? describe : describe.skip;
/** The budget of the issue: usable within 1 s. */
const BUDGET_MS = 1000;

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

	/** Opens `path`; the page is usable when its index of services is painted: measured by the page's own clock. */
	async function open(path: string) {
		const page = await browser.newPage();
		const errors: string[] = [];
		page.on("pageerror", (e) => errors.push(String(e)));
		page.on("console", (m) => {
			if (m.type() === "error") errors.push(m.text());
		});
		await page.goto(`${p.url}${path}`, { waitUntil: "commit" });
		await page.locator("#api-index details").first().waitFor({ state: "visible", timeout: 30_000 });
		const paint = await page.evaluate(
			() =>
				new Promise<number>((resolve) => {
					const fcp = () => performance.getEntriesByName("first-contentful-paint")[0]?.startTime;
					const t = fcp();
					if (t !== undefined) return resolve(t);
					new PerformanceObserver(() => resolve(fcp() ?? performance.now())).observe({ type: "paint" as never, buffered: true });
				}),
		);
		return { page, errors, paint };
	}

	it("the page is usable within 1 s: every service, collapsed, with its operations, before any script runs", async () => {
		const runs: number[] = [];
		for (let i = 0; i < 3; i++) {
			const { page, errors, paint } = await open("/api");
			runs.push(paint);
			if (i === 0) {
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
			}
			await page.close();
		}
		runs.sort((a, b) => a - b);
		// The median of three first paints: one slow run on a busy machine does not decide.
		expect({ medianMs: Math.round(runs[1]), under: runs[1] < BUDGET_MS }).toEqual({ medianMs: Math.round(runs[1]), under: true });
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
		expect(none.body).toEqual({ statusCode: 404, message: expect.stringMatching(/^no API document for 'nope' \(services: auth, domain, .*; the whole API: \/api-json\)$/), error: "Not Found" });
		const root = await p.http("GET", "/");
		expect(root.status).toBe(200);
		expect(root.body.docs).toBe("/api");
	});
});
