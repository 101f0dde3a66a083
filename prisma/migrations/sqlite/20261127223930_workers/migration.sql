-- CreateTable
CREATE TABLE "Worker" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "name" TEXT NOT NULL,
    "address" TEXT NOT NULL,
    "sealedSecret" TEXT NOT NULL,
    "certificatePem" TEXT,
    "state" TEXT NOT NULL DEFAULT 'active',
    "epoch" INTEGER NOT NULL DEFAULT 1,
    "vcpu" INTEGER NOT NULL DEFAULT 0,
    "memoryMib" INTEGER NOT NULL DEFAULT 0,
    "diskMib" INTEGER NOT NULL DEFAULT 0,
    "leaseUntil" DATETIME,
    "protocolVersion" INTEGER,
    "lastError" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL
);

-- RedefineTables
PRAGMA defer_foreign_keys=ON;
PRAGMA foreign_keys=OFF;
CREATE TABLE "new_Instance" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "image" TEXT NOT NULL,
    "imageProfile" TEXT NOT NULL,
    "imageVersion" TEXT,
    "artifactKey" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "desiredState" TEXT NOT NULL,
    "vcpu" INTEGER NOT NULL,
    "memoryMib" INTEGER NOT NULL,
    "diskMib" INTEGER NOT NULL,
    "sshPublicKey" TEXT NOT NULL,
    "guestHostname" TEXT NOT NULL,
    "sshHostKeys" JSONB,
    "autoSnapshotSeconds" INTEGER NOT NULL DEFAULT 300,
    "imageId" TEXT,
    "components" JSONB,
    "environmentVersionId" TEXT,
    "expiresAt" DATETIME,
    "lastCheckpointAt" DATETIME,
    "sessionSaved" BOOLEAN NOT NULL DEFAULT false,
    "setupStatus" TEXT NOT NULL DEFAULT 'none',
    "setupError" TEXT,
    "operation" TEXT,
    "operationStartedAt" DATETIME,
    "operationInput" JSONB,
    "errorMessage" TEXT,
    "workerId" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL,
    CONSTRAINT "Instance_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "Instance_workerId_fkey" FOREIGN KEY ("workerId") REFERENCES "Worker" ("id") ON DELETE RESTRICT ON UPDATE CASCADE
);
INSERT INTO "new_Instance" ("accountId", "artifactKey", "autoSnapshotSeconds", "components", "createdAt", "desiredState", "diskMib", "environmentVersionId", "errorMessage", "expiresAt", "guestHostname", "id", "image", "imageId", "imageProfile", "imageVersion", "lastCheckpointAt", "memoryMib", "name", "operation", "operationInput", "operationStartedAt", "sessionSaved", "setupError", "setupStatus", "sshHostKeys", "sshPublicKey", "status", "updatedAt", "vcpu") SELECT "accountId", "artifactKey", "autoSnapshotSeconds", "components", "createdAt", "desiredState", "diskMib", "environmentVersionId", "errorMessage", "expiresAt", "guestHostname", "id", "image", "imageId", "imageProfile", "imageVersion", "lastCheckpointAt", "memoryMib", "name", "operation", "operationInput", "operationStartedAt", "sessionSaved", "setupError", "setupStatus", "sshHostKeys", "sshPublicKey", "status", "updatedAt", "vcpu" FROM "Instance";
DROP TABLE "Instance";
ALTER TABLE "new_Instance" RENAME TO "Instance";
CREATE INDEX "Instance_accountId_createdAt_idx" ON "Instance"("accountId", "createdAt");
CREATE INDEX "Instance_imageId_idx" ON "Instance"("imageId");
CREATE INDEX "Instance_workerId_idx" ON "Instance"("workerId");
CREATE UNIQUE INDEX "Instance_accountId_name_key" ON "Instance"("accountId", "name");
PRAGMA foreign_keys=ON;
PRAGMA defer_foreign_keys=OFF;

-- CreateIndex
CREATE UNIQUE INDEX "Worker_name_key" ON "Worker"("name");
