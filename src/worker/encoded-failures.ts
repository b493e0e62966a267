/**
 * The failure converter the plugin gives a Worker that encodes payloads with codecs: failure
 * messages and stack traces move into an encoded payload (`encodeCommonAttributes`), so an apply
 * error's text (a card number, a customer's name) reaches the server through the codec like every
 * other payload instead of as plain text beside it.
 *
 * Loaded by path (Temporal `require()`s it in the Worker and bundles it into the workflow
 * sandbox), so this file is plain JavaScript in TypeScript's clothes: Node loads it as source too.
 */
import { DefaultFailureConverter } from '@temporalio/common';

export const failureConverter = new DefaultFailureConverter({ encodeCommonAttributes: true });
