/**
 * essential: the standard collection pattern on every collection of the domain (catalog/domains/essential.ts), and
 * sagas (services/essential/sagas.ts): the special actions start, add, commit and abort, the stage bookkeeping of
 * staged writes, and compensation.
 */
import type { ServiceSchema } from "moleculer";
import { essential } from "../catalog/domains/essential";
import { collectionMixin } from "../engine/collection.mixin";
import { sagaActions, sagaHooks } from "./essential/sagas";

const EssentialService: ServiceSchema = { name: "essential", mixins: [collectionMixin(essential, { sagas: sagaHooks })], actions: sagaActions };

export default EssentialService;
