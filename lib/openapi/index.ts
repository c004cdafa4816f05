/**
 * The OpenAPI 3.1 documents of the platform: the whole API (`/api-json`, document.ts) and one per service
 * (`/api-json/<service>`, per-service.ts), built from the route table and the catalog. The parts, by job: common.ts
 * (shared helpers and names), fields.ts (a collection's schemas from its fields), spec-schemas.ts (the spec's own
 * tables), responses.ts (shared parameters and error responses), op-parts.ts, collection-ops.ts, auth-ops.ts,
 * special-ops.ts and operations.ts (each route's operation, by kind).
 */
export { OPENAPI_MAX_BULK, schemaName } from "./common";
export { ALWAYS_RETURNED, documentSchema, fullyReturned } from "./fields";
export { queryParameterNames } from "./operations";
export { openApiDocument } from "./document";
export { DOC_SERVICES, openApiServiceDocument } from "./per-service";
