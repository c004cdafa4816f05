/**
 * The OpenAPI document declares ETag/If-None-Match/If-Match where the gateway honours them (docs/contracts.md "Retries and
 * concurrent writers"): every by-id read answers `ETag` and 304, every by-id write (PATCH, DELETE, PUT restore,
 * DELETE destroy, each special addressed by id) takes `If-Match` and may answer 412 `precondition failed`.
 */
import { openApiDocument } from "../../lib/openapi";
import { allRoutes } from "../../lib/routes";

const doc = openApiDocument() as any;
const paramNames = (op: any) => (op.parameters ?? []).map((p: any) => (p.$ref ? doc.components.parameters[p.$ref.split("/").pop()] : p).name);
const opOf = (method: string, path: string) => doc.paths[path.replace(/:([A-Za-z_]\w*)/g, "{$1}")]?.[method.toLowerCase()];

describe("OpenAPI: ETag, If-None-Match, If-Match, 304 and 412", () => {
	const byId = allRoutes().filter((r) => r.domain && r.collection && r.path.includes("/:id"));

	test("every by-id GET of a collection declares If-None-Match, an ETag answer and 304", () => {
		const gets = byId.filter((r) => r.op === "get");
		expect(gets.length).toBeGreaterThan(20);
		for (const r of gets) {
			const op = opOf("GET", r.path);
			expect(paramNames(op)).toContain("If-None-Match");
			expect(op.responses["200"].headers.ETag).toBeDefined();
			expect(op.responses["304"].headers.ETag).toBeDefined();
		}
	});

	test("every by-id write and special declares If-Match and 412 precondition failed", () => {
		const writes = byId.filter((r) => (r.op && ["patch", "remove", "restore", "destroy"].includes(r.op)) || r.special);
		const specials = writes.filter((r) => r.special).map((r) => `${r.method} ${r.path}`);
		expect(specials).toEqual(
			expect.arrayContaining([
				"POST /financial/invoices/:id/payment",
				"GET /financial/transactions/:id/verify",
				"GET /financial/transactions/:id/abort",
				"GET /essential/sagas/:id/commit",
				"GET /essential/sagas/:id/abort",
			]),
		);
		for (const r of writes) {
			const op = opOf(r.method, r.path);
			expect([r.path, paramNames(op)]).toEqual([r.path, expect.arrayContaining(["If-Match"])]);
			expect(op.responses["412"]).toEqual({ $ref: "#/components/responses/PreconditionFailed" });
		}
		expect(doc.components.responses.PreconditionFailed.content["application/json"].example).toEqual({
			statusCode: 412,
			message: "precondition failed",
			error: "Precondition Failed",
		});
	});
});
