-- RedefineTables
PRAGMA defer_foreign_keys=ON;
PRAGMA foreign_keys=OFF;
CREATE TABLE "new_Account" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "email" TEXT NOT NULL,
    "name" TEXT,
    "passwordHash" TEXT NOT NULL,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL,
    "signInLockedAt" DATETIME,
    "failedSignIns" INTEGER NOT NULL DEFAULT 0,
    "failedSignInsSince" DATETIME,
    "eventSequence" BIGINT NOT NULL DEFAULT 0,
    "eventsPrunedThrough" BIGINT NOT NULL DEFAULT 0,
    "deletionRequestedAt" DATETIME
);
INSERT INTO "new_Account" ("createdAt", "deletionRequestedAt", "email", "eventSequence", "failedSignIns", "failedSignInsSince", "id", "name", "passwordHash", "signInLockedAt", "updatedAt") SELECT "createdAt", "deletionRequestedAt", "email", "eventSequence", "failedSignIns", "failedSignInsSince", "id", "name", "passwordHash", "signInLockedAt", "updatedAt" FROM "Account";
DROP TABLE "Account";
ALTER TABLE "new_Account" RENAME TO "Account";
CREATE UNIQUE INDEX "Account_email_key" ON "Account"("email");
PRAGMA foreign_keys=ON;
PRAGMA defer_foreign_keys=OFF;
