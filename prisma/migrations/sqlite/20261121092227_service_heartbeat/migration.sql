-- CreateTable
CREATE TABLE "ServiceHeartbeat" (
    "minute" DATETIME NOT NULL PRIMARY KEY
);
