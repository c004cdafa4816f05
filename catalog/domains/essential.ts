import type { DomainDef } from "../types";

export const SAGA_STATES = ["AWAITING", "ABORTED", "COMMITTED"] as const;
export const SAGA_STAGE_ACTIONS = ["COUNT_DOCUMENTS", "INSERT_MANY", "FIND_ONE", "FIND", "FIND_ONE_AND_UPDATE", "FIND_ONE_AND_DELETE", "UPDATE_MANY"] as const;

export const essential: DomainDef = {
	name: "essential",
	restPort: 3050,
	grpcPort: 5050,
	description: "Sagas coordinating multi-service operations",
	collections: [
		{
			name: "sagas",
			description: "Saga instances",
			fields: {
				/** The range (5 to 900) is checked by the saga hooks, with the same message as `start`. */
				ttl: { type: "integer", required: true, description: "Lifetime in seconds, 5 to 900" },
				job: { type: "string", required: true, format: "uuid" },
				state: { type: "string", required: true, enum: SAGA_STATES },
				session: { type: "string", required: true, format: "hex" },
				expires_at: { type: "date", readOnly: true, description: "When the saga is compensated if still AWAITING (start + ttl)" },
				committed_at: { type: "date", readOnly: true },
				aborted_at: { type: "date", readOnly: true },
				/** Why it was aborted: `abort` (a caller) or `expiry` (the watcher). */
				abort_reason: { type: "string", readOnly: true, enum: ["abort", "expiry"] },
			},
			specials: [
				{
					action: "start",
					method: "POST",
					path: "start",
					implemented: true,
					description: "Start a saga owned by the caller: `AWAITING` until commit, abort or expiry (`ttl` seconds, 5 to 900)",
					body: { ttl: { type: "integer", required: true, minimum: 5, description: "Lifetime in seconds, 5 to 900" } },
					answer: "data",
				},
				{
					action: "start",
					method: "POST",
					path: "add",
					implemented: true,
					description: "Record a stage of work done outside the platform (never undone by the platform; participants learn of an abort from the saga's change event)",
					body: {
						saga: { type: "string", required: true, format: "objectId" },
						bucket: { type: "string", required: true, description: "`service/collection` the work concerns" },
						action: { type: "string", required: true, enum: SAGA_STAGE_ACTIONS },
						req: { type: "object", required: true },
						res: { type: "object" },
					},
					answer: "data:essential/saga-stages",
					errors: [404, 409],
				},
				{
					action: "abort",
					method: "GET",
					path: ":id/abort",
					implemented: true,
					description: "Compensate every stage, newest first, then `ABORTED` with `aborted_at`; repeating it answers the same; a committed saga answers 409",
					answer: "data",
					errors: [404, 409],
				},
				{
					action: "commit",
					method: "GET",
					path: ":id/commit",
					implemented: true,
					description: "Make the staged writes final: `COMMITTED` with `committed_at`; repeating it answers the same; an aborted saga answers 409",
					answer: "data",
					errors: [404, 409],
				},
			],
		},
		{
			name: "saga-stages",
			description: "Saga steps",
			fields: {
				saga: { type: "string", required: true, format: "objectId", relation: "essential/sagas" },
				bucket: { type: "string", required: true, description: "Target collection `service/collection`; its enum is filled from the catalog in catalog/index.ts" },
				action: { type: "string", required: true, enum: SAGA_STAGE_ACTIONS },
				req: { type: "object", required: true },
				res: { type: "any", description: "The operation's answer" },
				/** `pending` (recorded before the write), `done`, `compensated`, `conflict`, or `external` (an `add`). */
				state: { type: "string", readOnly: true, enum: ["pending", "done", "compensated", "conflict", "external"] },
				conflict: { type: "boolean", readOnly: true, description: "Compensation left a document alone: someone else changed it after the stage" },
				compensated_at: { type: "date", readOnly: true },
				/** What compensation needs (ids, before- and after-images, balance moves): never returned. */
				images: { type: "array", items: "object", internal: true },
				/** Order of the stage in its saga (compensation runs newest first). */
				seq: { type: "integer", internal: true },
			},
		},
	],
};
