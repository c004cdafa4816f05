/**
 * Issue 36: the browser console at /console (docs/console.md), driven in headless Chromium against a platform with
 * two tenants (test/helpers/tenants.ts). The console is a client of the public REST API: each test checks what the
 * page shows against what the API holds, and that whatever the page tries beyond the signed-in user's grants is
 * refused by the API (the console hides nothing it relies on).
 *
 * With CONSOLE_SCREENSHOTS=1 the tests also write the screenshots of docs/console.md (docs/console/*.png).
 */
import { mkdirSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { gzipSync } from "node:zlib";
import type { Browser, Page } from "playwright-core";
import { chromiumAvailable, launchChromium } from "../helpers/chromium";
import { bootTenancy, ok, type Tenancy, type Tenant } from "../helpers/tenants";
import { aesOf } from "../helpers/auth";
import { encryptEnvelope } from "../../lib/crypto";
import { totp } from "../../lib/totp";

const suite = chromiumAvailable("console") ? describe : describe.skip;
jest.setTimeout(180_000);

const SHOTS = process.env.CONSOLE_SCREENSHOTS === "1" ? path.join(__dirname, "../../docs/console") : undefined;
const TOTP_HEX = "3132333435363738393031323334353637383930";

/** Waits until `check` holds (checked every 100 ms), failing after `ms`. */
async function until(check: () => Promise<boolean>, ms = 10_000): Promise<void> {
	for (const end = Date.now() + ms; !(await check());) {
		if (Date.now() > end) throw new Error(`not true within ${ms} ms: ${check.toString()}`);
		await new Promise((r) => setTimeout(r, 100));
	}
}

/** A page of the console with what went wrong in it: page errors, console errors, requests to another origin. */
interface Watched {
	page: Page;
	pageErrors: string[];
	consoleErrors: string[];
	foreign: string[];
}

suite("the console in Chromium", () => {
	let t: Tenancy;
	let browser: Browser;
	const opened: Watched[] = [];

	beforeAll(async () => {
		// Webhooks to a receiver on 127.0.0.1, given one attempt: a failing one ends `failed` at once.
		t = await bootTenancy({ webhookAllowPrivate: true, webhookRetrySchedule: [0] });
		browser = await launchChromium();
		if (SHOTS) mkdirSync(SHOTS, { recursive: true });
	});
	afterAll(async () => {
		await browser?.close();
		await t?.cleanup();
	});

	async function open(viewport = { width: 1280, height: 860 }): Promise<Watched> {
		const page = await browser.newPage({ viewport });
		const w: Watched = { page, pageErrors: [], consoleErrors: [], foreign: [] };
		page.on("pageerror", (e) => w.pageErrors.push(String(e)));
		page.on("console", (m) => void (m.type() === "error" && w.consoleErrors.push(m.text())));
		page.on("request", (r) => void (!r.url().startsWith(t.p.url) && !r.url().startsWith("data:") && !r.url().startsWith("blob:") && w.foreign.push(r.url())));
		opened.push(w);
		return w;
	}

	/**
	 * Nothing went wrong in the page: no script error, no request elsewhere, and no console error but the browser's
	 * own line for each refusal the test made the API answer (`statuses`).
	 */
	function clean(w: Watched, statuses: number[] = []) {
		expect(w.pageErrors).toEqual([]);
		expect(w.foreign).toEqual([]);
		const allowed = new RegExp(`^Failed to load resource: the server responded with a status of (${statuses.join("|") || "none"}) `);
		expect(w.consoleErrors.filter((m) => !allowed.test(m))).toEqual([]);
	}

	const shot = async (page: Page, name: string) => void (SHOTS && (await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: false })));

	async function signIn(page: Page, username: string, password: string, clientId?: string) {
		await page.getByLabel("Username").fill(username);
		await page.getByLabel("Password").fill(password);
		if (clientId !== undefined) await page.getByLabel("Client id").fill(clientId);
		await page.getByRole("button", { name: "Sign in" }).click();
	}

	const row = (page: Page, id: string) => page.locator(`tr[data-id="${id}"]`);

	it("serves its page under a strict CSP, its assets within 300 KB gzipped, and paints within 1 s", async () => {
		const res = await fetch(`${t.p.url}/console/content/notes`);
		expect(res.status).toBe(200);
		expect(res.headers.get("content-security-policy")).toBe(
			"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
		);
		const html = await res.text();
		expect(html).not.toMatch(/<script>|<script [^>]*>[^<]/);
		expect(html).not.toMatch(/ style=/);
		expect(html).toContain(`data-root-client="${t.p.root.client_id}"`);
		let gz = 0;
		for (const name of ["app.js", "app.css"]) {
			const a = await fetch(`${t.p.url}/console/assets/${name}`);
			expect(a.status).toBe(200);
			expect(a.headers.get("content-security-policy")).toContain("script-src 'self'");
			gz += gzipSync(Buffer.from(await a.arrayBuffer())).length;
			const again = await fetch(`${t.p.url}/console/assets/${name}`, { headers: { "if-none-match": a.headers.get("etag")! } });
			expect(again.status).toBe(304);
		}
		expect(gz).toBeLessThan(300 * 1024);
		const missing = await fetch(`${t.p.url}/console/assets/nope.js`);
		expect([missing.status, await missing.json()]).toEqual([404, { statusCode: 404, message: "not found", error: "Not Found" }]);

		const w = await open();
		const paints: number[] = [];
		for (let i = 0; i < 3; i++) {
			await w.page.goto(`${t.p.url}/console`);
			await w.page.getByLabel("Username").waitFor();
			paints.push(await w.page.evaluate(() => performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? performance.now()));
		}
		console.log(`console: assets ${gz} bytes gzipped; first contentful paint ${paints.map((p) => Math.round(p)).join(", ")} ms`);
		expect(Math.min(...paints)).toBeLessThan(1000);
		// The root client is the default; the fields carry the names the password grant uses.
		expect(await w.page.getByLabel("Client id").inputValue()).toBe(t.p.root.client_id);
		expect(await w.page.locator("form input").evaluateAll((els) => els.map((e) => (e as unknown as { name: string }).name))).toEqual(["username", "password", "client_id"]);
		await shot(w.page, "signin");
		clean(w);
	});

	it("root signs in by keyboard, opens content/notes, sees a note created over REST, and a later one appears without a reload", async () => {
		const before = (await ok(t.as(t.root, "POST", "/content/notes", { title: "made over REST before", description: "first" }), "note")).data;
		const w = await open();
		const { page } = w;
		await page.goto(`${t.p.url}/console/content/notes`);
		await page.getByLabel("Username").focus();
		await page.keyboard.type(t.p.root.username);
		await page.keyboard.press("Tab");
		await page.keyboard.type(t.p.root.password);
		await page.keyboard.press("Enter");
		await row(page, before.id).waitFor({ timeout: 30_000 });
		expect(page.url()).toBe(`${t.p.url}/console/content/notes`);
		await expect(row(page, before.id).textContent()).resolves.toContain("made over REST before");
		await page.locator(".live-live").waitFor({ timeout: 15_000 });
		const navigations: string[] = [];
		page.on("framenavigated", (f) => void (f === page.mainFrame() && navigations.push(f.url())));

		const later = (await ok(t.as(t.root, "POST", "/content/notes", { title: "made while the page is open" }), "note")).data;
		await row(page, later.id).waitFor({ timeout: 15_000 });
		await expect(row(page, later.id).textContent()).resolves.toContain("made while the page is open");
		await page.locator(`.events li[data-op="enter"]`, { hasText: later.id }).waitFor();
		expect(navigations).toEqual([]);
		await shot(page, "collection");

		// The raw JSON query and a projection reach the API as the table shows them.
		await page.getByLabel("Raw JSON").check();
		await page.getByLabel("Query (JSON)").fill(JSON.stringify({ title: "made while the page is open" }));
		await page.getByLabel("Fields (projection)").fill("title");
		await page.getByRole("button", { name: "Apply" }).click();
		await page.locator("tbody tr").first().waitFor();
		await until(async () => (await page.locator("tbody tr").count()) === 1);
		expect(await page.locator("thead th").allTextContents()).toEqual(["id", "title"]);
		clean(w);
		await page.close();
	});

	it("an edit saved after the document changed elsewhere shows the conflict with both versions, and overwrites nothing", async () => {
		const note = (await ok(t.as(t.root, "POST", "/content/notes", { title: "to edit", description: "original" }), "note")).data;
		const w = await open();
		const { page } = w;
		await page.goto(`${t.p.url}/console/content/notes/${note.id}`);
		await signIn(page, t.p.root.username, t.p.root.password);
		await page.locator(`[data-field="description"] dd`, { hasText: "original" }).waitFor({ timeout: 30_000 });
		await page.getByRole("button", { name: "Edit" }).click();
		const editor = page.getByLabel("Fields (JSON)");
		const mine = JSON.parse(await editor.inputValue());
		await editor.fill(JSON.stringify({ ...mine, description: "from the console" }, null, 2));

		// Someone else changes the document meanwhile.
		await ok(t.as(t.root, "PATCH", `/content/notes/${note.id}`, { description: "changed elsewhere" }), "patch");
		await page.getByRole("button", { name: "Save" }).click();
		const conflict = page.locator("section.conflict");
		await conflict.waitFor();
		await expect(page.getByRole("alert").first().textContent()).resolves.toBe("412 Precondition Failed: precondition failed");
		await expect(conflict.textContent()).resolves.toContain("from the console");
		await expect(conflict.textContent()).resolves.toContain("changed elsewhere");
		await shot(page, "conflict");
		expect((await ok(t.as(t.root, "GET", `/content/notes/${note.id}`), "get")).data.description).toBe("changed elsewhere");

		// On top of the current version, the save goes through.
		await page.getByRole("button", { name: "Load the current version" }).click();
		await until(async () => JSON.parse(await page.getByLabel("Fields (JSON)").inputValue()).description === "changed elsewhere");
		const current = JSON.parse(await page.getByLabel("Fields (JSON)").inputValue());
		await page.getByLabel("Fields (JSON)").fill(JSON.stringify({ ...current, description: "second try" }));
		await page.getByRole("button", { name: "Save" }).click();
		await page.getByText("Saved.", { exact: true }).waitFor();
		expect((await ok(t.as(t.root, "GET", `/content/notes/${note.id}`), "get")).data.description).toBe("second try");

		// Soft delete, restore, destroy: each as the API did it.
		await page.getByRole("button", { name: "Delete" }).click();
		await page.getByText("Deleted (soft)").waitFor();
		expect((await t.as(t.root, "GET", `/content/notes/${note.id}`)).status).toBe(404);
		await page.getByRole("button", { name: "Restore" }).click();
		await page.getByText("Restored.", { exact: true }).waitFor();
		expect((await t.as(t.root, "GET", `/content/notes/${note.id}`)).status).toBe(200);
		await page.getByRole("button", { name: "Destroy" }).click();
		await page.getByRole("button", { name: "Confirm: destroy for good" }).click();
		await page.getByText("Destroyed").waitFor();
		expect((await t.as(t.root, "GET", `/content/notes/${note.id}`)).status).toBe(404);
		clean(w, [412]);
		await page.close();
	});

	it("a tenant's user sees only the documents and fields its grant allows, and what it tries beyond is refused by the API", async () => {
		const a = t.a;
		await t.grant(t.root, { subject: a.limited.subject, action: "read", object: "content:notes", field: ["title"] });
		const shared = (await ok(t.as(a.admin.token, "POST", "/content/notes", { title: "shared with limited", description: "hidden body", shares: [a.limited.id] }), "note")).data;
		const unshared = (await ok(t.as(a.admin.token, "POST", "/content/notes", { title: "not shared" }), "note")).data;
		const foreign = (await ok(t.as(t.b.admin.token, "POST", "/content/notes", { title: "tenant b's note" }), "note")).data;

		const w = await open();
		const { page } = w;
		await page.goto(`${t.p.url}/console/content/notes`);
		await signIn(page, a.limited.username, a.limited.password, a.client.id);
		await row(page, shared.id).waitFor({ timeout: 30_000 });
		await page.locator(".live-live").waitFor({ timeout: 15_000 });
		expect(await page.locator("tbody tr").count()).toBe(1);
		// Hidden fields are absent: no column, no cell, no value anywhere on the page.
		expect(await page.locator("thead th").allTextContents()).toEqual(["id", "title"]);
		const text = await page.locator("main").textContent();
		for (const hidden of ["hidden body", unshared.id, foreign.id, "tenant b's note"]) expect(text).not.toContain(hidden);
		await shot(page, "limited-user");

		// A change of its view arrives live, with the grant's fields only.
		await ok(t.as(a.admin.token, "PATCH", `/content/notes/${shared.id}`, { title: "renamed", description: "still hidden" }), "patch");
		await row(page, shared.id).getByText("renamed").waitFor({ timeout: 15_000 });
		expect(await page.locator("main").textContent()).not.toContain("still hidden");

		// The document view: the grant's fields only; the buttons are there, and the API refuses what they ask.
		await page.getByRole("link", { name: shared.id }).first().click();
		await page.locator(`[data-field="title"]`).waitFor();
		expect(await page.locator("dl.doc dt").allTextContents()).toEqual(["id", "title"]);
		await page.getByRole("button", { name: "Edit" }).click();
		await page.getByLabel("Fields (JSON)").fill(JSON.stringify({ title: "changed by limited" }));
		await page.getByRole("button", { name: "Save" }).click();
		await expect(page.getByRole("alert").first().textContent()).resolves.toBe("403 Forbidden: no grant for write on content:notes");
		await page.getByRole("button", { name: "Cancel" }).click();
		await page.getByRole("button", { name: "Delete" }).click();
		await expect(page.getByRole("alert").first().textContent()).resolves.toBe("403 Forbidden: no grant for write on content:notes");
		expect((await ok(t.as(a.admin.token, "GET", `/content/notes/${shared.id}`), "get")).data).toMatchObject({ title: "renamed", description: "still hidden" });

		// Another tenant's document by its address, a collection without a grant, the grants: refused.
		await page.goto(`${t.p.url}/console/content/notes/${foreign.id}`);
		await signIn(page, a.limited.username, a.limited.password, a.client.id);
		await expect(page.getByRole("alert").first().textContent()).resolves.toBe("404 Not Found: document not found");
		await page.getByRole("link", { name: "Grants and access" }).click();
		await expect(page.getByRole("alert").first().textContent()).resolves.toBe("403 Forbidden: no grant for read on auth:grants");
		// An address typed or bookmarked: the history entry, as the browser's back and forward move through them.
		await page.evaluate(() => {
			const w = globalThis as any;
			w.history.pushState(null, "", "/console/content/posts");
			w.dispatchEvent(new w.PopStateEvent("popstate"));
		});
		await expect(page.getByRole("alert").first().textContent()).resolves.toBe("403 Forbidden: no grant for read on content:posts");
		clean(w, [403, 404]);
		await page.close();
	});

	it("the grant editor checks a grant before sending it, makes one that /auth/can then reports; an APT is shown once", async () => {
		const a = t.a;
		const w = await open();
		const { page } = w;
		await page.goto(`${t.p.url}/console/access/grants`);
		await signIn(page, a.admin.username, a.admin.password, a.client.id);
		const editor = page.getByRole("form", { name: "Grant editor" });
		await editor.waitFor({ timeout: 30_000 });
		await editor.getByLabel("Subject", { exact: true }).fill("@reviewer");
		await editor.getByLabel("Action").fill("read");
		await editor.getByLabel("Object", { exact: true }).fill("content:nope");
		await editor.getByRole("button", { name: "Create grant" }).click();
		await expect(editor.getByRole("alert").allTextContents()).resolves.toEqual([
			"subject '@reviewer' needs a domain suffix (@<domain>)object: 'content:nope' is not a collection (collections of content: notes, posts, tickets; or content:* for all)",
		]);
		expect((await ok(t.as(a.admin.token, "GET", `/auth/grants?query=${encodeURIComponent(JSON.stringify({ subject: `@reviewer@${a.domain}` }))}`), "grants")).total).toBe(0);

		// Valid here, refused there: the API's own message is shown (a domain the tenant does not have).
		await editor.getByLabel("Subject", { exact: true }).fill("@reviewer@b.example");
		await editor.getByLabel("Object", { exact: true }).fill("content:posts");
		await editor.getByRole("button", { name: "Create grant" }).click();
		const refused = (await t.as(a.admin.token, "POST", "/auth/grants", { subject: "@reviewer@b.example", action: "read", object: "content:posts" })).body;
		await expect(editor.getByRole("alert").textContent()).resolves.toBe(`${refused.statusCode} ${refused.error}: ${refused.message}`);

		await editor.getByLabel("Subject", { exact: true }).fill(`@reviewer@${a.domain}`);
		await editor.getByLabel("Fields (comma-separated; none: every field)").fill("title, status");
		await editor.getByRole("button", { name: "Create grant" }).click();
		await editor.getByText(/^Grant [0-9a-f]{24} created\.$/).waitFor();
		const made = (await ok(t.as(a.admin.token, "GET", `/auth/grants?query=${encodeURIComponent(JSON.stringify({ subject: `@reviewer@${a.domain}` }))}`), "grants")).items;
		expect(made).toMatchObject([{ subject: `@reviewer@${a.domain}`, action: "read", object: "content:posts", field: ["title", "status"] }]);

		const can = page.getByRole("form", { name: "Explain access" });
		await can.getByLabel("Subjects (comma-separated; none: you)").fill(`@reviewer@${a.domain}`);
		await can.getByLabel("Can action").fill("read");
		await can.getByLabel("On object").fill("content:posts");
		await can.getByRole("button", { name: "Explain" }).click();
		await can.locator('[data-granted="true"]').waitFor();
		await expect(can.locator("pre.json").textContent()).resolves.toContain(`"subject": "@reviewer@${a.domain}"`);
		const api = (
			await ok(t.as(a.admin.token, "POST", "/auth/can", { subjects: [`@reviewer@${a.domain}`], action: "read", object: "content:posts" }, { "x-can-with-policies": "true" }), "can")
		).data;
		expect(api.granted).toBe(true);
		expect(JSON.parse((await can.locator("pre.json").textContent())!)).toEqual(api.policies);
		await can.getByRole("heading", { name: "Can … ?" }).scrollIntoViewIfNeeded();
		await shot(page, "grants");
		await can.getByLabel("Can action").fill("write");
		await can.getByRole("button", { name: "Explain" }).click();
		await can.locator('[data-granted="false"]').waitFor();

		// A new APT: its token shown once, working; gone from the page once dismissed, and nowhere else; revocable.
		await page.getByRole("link", { name: "Personal tokens" }).click();
		const form = page.getByRole("form", { name: "New APT" });
		await form.getByLabel("Name").fill("console ci token");
		await form.getByLabel("Scopes (comma-separated; none: yours)").fill("read:content");
		await form.getByRole("button", { name: "Create APT" }).click();
		const shown = page.locator("code.secret");
		await shown.waitFor();
		const apt = (await shown.textContent())!;
		expect(apt).toMatch(/^APT-/);
		const id = (await shown.getAttribute("data-apt"))!;
		expect((await t.p.http("GET", "/content/notes", { token: apt })).status).toBe(200);
		await shot(page, "apt");
		await page.getByRole("button", { name: "I have copied it" }).click();
		await row(page, id).waitFor();
		expect(await page.content()).not.toContain(apt);
		await page.getByRole("link", { name: "Users and roles" }).click();
		await page.getByRole("link", { name: "Personal tokens" }).click();
		await row(page, id).waitFor();
		expect(await page.content()).not.toContain(apt);
		await row(page, id).getByRole("button", { name: "Revoke console ci token" }).click();
		await row(page, id).waitFor({ state: "detached" });
		expect((await t.p.http("GET", "/content/notes", { token: apt })).status).toBe(401);
		clean(w, [400, 403]);
		await page.close();
	});

	it("operations: /status of each dependency, metrics as charts, webhooks; readable on a phone", async () => {
		const w = await open();
		const { page } = w;
		await page.goto(`${t.p.url}/console/ops/status`);
		await signIn(page, t.p.root.username, t.p.root.password);
		await page.locator('tr[data-dependency="document store"] td', { hasText: "up" }).first().waitFor({ timeout: 30_000 });
		await shot(page, "status");
		await page.getByRole("link", { name: "Metrics" }).click();
		// Three samples make a line of two points (a rate needs two samples).
		await page.locator("figure.chart polyline[points*=','][points*=' ']").first().waitFor({ state: "attached", timeout: 20_000 });
		await expect(page.locator("figure.chart figcaption").first().textContent()).resolves.toMatch(/^Requests: [\d.]+ per second$/);
		await shot(page, "metrics");
		await page.getByRole("link", { name: "Webhooks" }).click();
		await page.getByRole("form", { name: "New webhook" }).getByLabel("Webhook URL").fill("https://hooks.example.com/console");
		await page.getByRole("button", { name: "Register" }).click();
		await page.locator("td", { hasText: "https://hooks.example.com/console" }).waitFor();
		clean(w);
		await page.close();

		const phone = await open({ width: 390, height: 844 });
		await phone.page.goto(`${t.p.url}/console/content/notes`);
		await signIn(phone.page, t.p.root.username, t.p.root.password);
		await phone.page.locator("tbody tr").first().waitFor({ timeout: 30_000 });
		// Nothing wider than the screen but the table, which scrolls inside its own box.
		expect(await phone.page.evaluate(() => (globalThis as any).document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
		await shot(phone.page, "phone");
		clean(phone);
		await phone.page.close();
	});

	it("webhook deliveries: a tenant admin sees a failed delivery, redelivers it and sees it delivered", async () => {
		const a: Tenant = t.a;
		let answer = 500;
		const got: string[] = [];
		const server = http.createServer((req, res) => {
			const chunks: Buffer[] = [];
			req.on("data", (c) => chunks.push(c));
			req.on("end", () => {
				const e = JSON.parse(Buffer.concat(chunks).toString("utf8"));
				got.push(`${e.op} ${e.id} ${answer}`);
				res.writeHead(answer).end();
			});
		});
		await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
		try {
			const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`;
			const config = (await ok(t.as(a.admin.token, "POST", "/context/configs", { key: "CQRS", value: { webhook: url } }), "config")).data.id as string;
			// Its own creation is a change of the tenant: posted once, answered 500, the delivery fails and the config is disabled.
			await until(async () => (await t.as(a.admin.token, "GET", `/context/configs/${config}`)).body.data.value.active === false, 20_000);
			const failed = (await ok(t.as(a.admin.token, "GET", `/context/configs/${config}/deliveries?status=failed`), "deliveries")).items[0];
			const w = await open();
			const { page } = w;
			await page.goto(`${t.p.url}/console/ops/webhooks?client_id=${a.client.id}`);
			await signIn(page, a.admin.username, a.admin.password);
			await page.getByRole("link", { name: config }).click();
			const line = row(page, failed.id);
			await line.and(page.locator('[data-status="failed"]')).waitFor({ timeout: 20_000 });
			await expect(line.textContent()).resolves.toContain("500: gave up after 1 attempts: HTTP 500");
			await expect(page.locator("main p, section p").filter({ hasText: url }).first().textContent()).resolves.toContain("disabled");
			answer = 200;
			await page.getByRole("button", { name: `Redeliver ${failed.id}` }).click();
			await page
				.getByRole("status")
				.filter({ hasText: `Delivery ${failed.id} queued again.` })
				.waitFor();
			// The dispatcher sends it at once; the page shows it delivered on a refresh.
			await until(async () => {
				await page.getByRole("button", { name: "Refresh" }).click();
				return (await line.getAttribute("data-status", { timeout: 2000 }).catch(() => null)) === "delivered";
			}, 20_000);
			expect(await line.locator("td").nth(4).textContent()).toBe("1");
			// The config's creation, answered 500 then, redelivered, 200 (its re-enabling is a change of its own, also posted).
			expect(got.filter((g) => g.startsWith(`c ${config} `))).toEqual([`c ${config} 500`, `c ${config} 200`]);
			await expect(page.locator("section p").filter({ hasText: url }).first().textContent()).resolves.toContain("active");
			await shot(page, "webhook");
			// The API agrees with the page.
			const now = (await ok(t.as(a.admin.token, "GET", `/context/configs/${config}/deliveries?status=delivered`), "delivered")).items;
			expect(now.map((d: any) => d.id)).toContain(failed.id);
			clean(w);
			await page.close();
		} finally {
			server.closeAllConnections();
			await new Promise((r) => server.close(r));
		}
	});

	it("the audit trail shows the requests just made; a tenant's user sees its tenant's only, root every tenant's", async () => {
		const a: Tenant = t.a;
		const mine = (await ok(t.as(a.member.token, "POST", "/content/notes", { title: "audited in a" }), "note a")).data.id as string;
		const theirs = (await ok(t.as(t.b.member.token, "POST", "/content/notes", { title: "audited in b" }), "note b")).data.id as string;
		const filtered = async (page: Page) => {
			await page.getByRole("form", { name: "Audit filter" }).getByLabel("Path starts with").fill("/content/notes");
			await page.getByRole("form", { name: "Audit filter" }).getByLabel("Kind").selectOption("request");
			await page.getByRole("button", { name: "Apply" }).click();
		};
		const shown = (page: Page, id: string) => page.locator("tbody tr", { hasText: id });
		const w = await open();
		const { page } = w;
		await page.goto(`${t.p.url}/console/ops/audit?client_id=${a.client.id}`);
		await signIn(page, a.member.username, a.member.password);
		await filtered(page);
		// Entries reach the trail through the audit stream, within a second or so.
		await until(async () => {
			await page.getByRole("button", { name: "Refresh" }).click();
			return (await shown(page, mine).count()) > 0;
		}, 20_000);
		await expect(shown(page, mine).first().textContent()).resolves.toContain("POST /content/notes");
		expect(await shown(page, theirs).count()).toBe(0);
		const clients = await page.locator("tbody tr td:nth-child(7)").allTextContents();
		expect(clients.length).toBeGreaterThan(0);
		expect([...new Set(clients)]).toEqual([a.client.id]);
		await shot(page, "audit");
		clean(w);
		await page.close();

		const r = await open();
		await r.page.goto(`${t.p.url}/console/ops/audit`);
		await signIn(r.page, t.p.root.username, t.p.root.password);
		await filtered(r.page);
		await until(async () => {
			await r.page.getByRole("button", { name: "Refresh" }).click();
			return (await shown(r.page, theirs).count()) > 0 && (await shown(r.page, mine).count()) > 0;
		}, 20_000);
		clean(r);
		await r.page.close();
	});

	it("the TOTP step when the user has one; tokens refreshed before they expire keep the page and its live cursor working", async () => {
		const b: Tenant = t.b;
		const uid = b.admin.id;
		await ok(t.as(b.admin.token, "PATCH", `/identity/users/${uid}?zone=client`, { props: { totp: encryptEnvelope(aesOf(t.p), TOTP_HEX) } }), "totp");
		await ok(t.as(t.root, "PATCH", `/domain/clients/${b.client.id}`, { access_token_ttl: 8 }), "ttl");
		const w = await open();
		const { page } = w;
		await page.goto(`${t.p.url}/console/content/notes?client_id=${b.client.id}`);
		expect(await page.getByLabel("Client id").inputValue()).toBe(b.client.id);
		await signIn(page, b.admin.username, b.admin.password);
		const code = page.getByLabel("Code from your authenticator");
		await code.waitFor({ timeout: 30_000 });
		const now = totp(TOTP_HEX, Date.now());
		const wrong = String((Number(now) + 500_000) % 1_000_000).padStart(6, "0");
		await code.fill(wrong);
		await page.getByRole("button", { name: "Verify" }).click();
		await expect(page.getByRole("alert").textContent()).resolves.toBe("the code is not valid: enter the current code of your authenticator");
		expect(await page.locator("table").count()).toBe(0);
		await code.fill(totp(TOTP_HEX, Date.now()));
		await page.getByRole("button", { name: "Verify" }).click();
		await page.locator(".live-live").waitFor({ timeout: 30_000 });

		// Past two lifetimes of the first token: the page still reads, and the live cursor still brings changes.
		await new Promise((r) => setTimeout(r, 17_000));
		const late = (await ok(t.as(b.admin.token, "POST", "/content/notes", { title: "after the refreshes" }), "note")).data;
		await row(page, late.id).waitFor({ timeout: 20_000 });
		await page.getByRole("button", { name: "Apply" }).click();
		await row(page, late.id).waitFor();
		await page.getByRole("button", { name: "Sign out" }).click();
		await page.getByLabel("Username").waitFor();
		clean(w);
		await page.close();
	});
});
