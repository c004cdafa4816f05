/**
 * Issue 13 item 2: the OpenAPI schemas say what fields mean. Every field of every collection (and every property of
 * every component schema) has a description, collection fields an example too; the grant subject forms listed are
 * the ones the server accepts.
 */
import { DOMAINS, PLATFORM_FIELDS, SETTABLE_FIELDS } from "../../catalog";
import { openApiDocument } from "../../lib/openapi";
import { validateGrant } from "../../lib/grant-validation";

const doc = openApiDocument() as any;

function undescribed(schema: any, where: string, out: string[]): void {
	if (!schema || typeof schema !== "object") return;
	for (const [k, p] of Object.entries<any>(schema.properties ?? {})) {
		if (!p.description && !p.$ref) out.push(`${where}.${k}`);
		if (p.type === "object" || p.properties) undescribed(p, `${where}.${k}`, out);
	}
}

describe("field descriptions", () => {
	test("every field of every collection has a description in the catalog", () => {
		const missing: string[] = [];
		for (const [k, f] of Object.entries({ ...PLATFORM_FIELDS, ...SETTABLE_FIELDS })) if (!f.description) missing.push(`*.${k}`);
		for (const d of DOMAINS) for (const c of d.collections) for (const [k, f] of Object.entries(c.fields)) if (!f.description) missing.push(`${d.name}/${c.name}.${k}`);
		expect(missing).toEqual([]);
	});

	test("every field a caller sees or sends has an example", () => {
		const missing: string[] = [];
		for (const d of DOMAINS)
			for (const c of d.collections) for (const [k, f] of Object.entries(c.fields)) if (!f.internal && f.example === undefined) missing.push(`${d.name}/${c.name}.${k}`);
		expect(missing).toEqual([]);
	});

	test("every property of every component schema of the OpenAPI document has a description", () => {
		const missing: string[] = [];
		for (const [name, s] of Object.entries<any>(doc.components.schemas)) undescribed(s, name, missing);
		expect(missing).toEqual([]);
	});

	test("the document shows the meaning of the grant, config, client, APT and user fields", () => {
		const s = doc.components.schemas;
		for (const [schema, field] of [
			["AuthGrants", "subject"],
			["AuthGrants", "action"],
			["AuthGrants", "object"],
			["Grant", "subject"],
			["ContextConfigs", "eid"],
			["ContextConfigs", "key"],
			["DomainClients", "domains"],
			["DomainClients", "coworkers"],
			["AuthApts", "scopes"],
			["IdentityUsers", "subjects"],
		]) {
			const p = s[schema]?.properties?.[field];
			expect({ schema, field, description: typeof p?.description === "string" && p.description.length > 10 }).toEqual({ schema, field, description: true });
		}
		expect(s.AuthGrants.properties.subject.examples).toEqual(["@editor@acme.example"]);
	});

	test("the subject forms the Grant schema lists are accepted by the server, and a role without a domain is not listed", () => {
		const text: string = doc.components.schemas.Grant.properties.subject.description;
		expect(text).not.toMatch(/`@role`(?!@)/);
		const forms = [...text.matchAll(/`([^`]+)`/g)].map((m) => m[1]).filter((f) => f.includes("@"));
		expect(forms.length).toBeGreaterThanOrEqual(4);
		const concrete = (f: string) =>
			f
				.replace("<uid|aid|cid>", "65f1c0a2b3c4d5e6f7a8b9c0")
				.replace("<username>", "alice")
				.replace("<group>", "team@example.com")
				.replace(/<domain>|\bdomain\b/, "acme.example")
				.replace("<cid>", "65f1c0a2b3c4d5e6f7a8b9c1")
				.replace("@role", "@editor");
		for (const f of forms) expect(() => validateGrant({ subject: concrete(f), action: "read", object: "content:notes" }, ["acme.example"])).not.toThrow();
		expect(() => validateGrant({ subject: "@editor", action: "read", object: "content:notes" }, ["acme.example"])).toThrow("needs a domain suffix");
	});
});
